"""The real daemon with a ``kind: peer`` tier, as another node's daemon uses it: over HTTP with a
``peer`` token, on its own loopback address; the fleet's table shows where peers reach it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.conftest import posix_config_dict
from tests.fixtures.daemon import Daemon
from tests.fixtures.daemon import launch_daemon as launch_daemon  # the fixture
from tests.fixtures.net import free_port
from tests.fixtures.world import crc

ADDRESS = "127.0.0.5"


def test_a_peer_sends_a_file_and_gets_it_back(tmp_path: Path, launch_daemon: Callable[..., Daemon]) -> None:
    listen = f"{ADDRESS}:{free_port()}"
    data = posix_config_dict(
        tmp_path,
        api={
            "listen": listen,
            "tokens": [
                {"name": "node-b", "token": "p-token", "role": "peer"},
                {"name": "viewer", "token": "r-token", "role": "read"},
            ],
        },
        fleet={"advertise_url": f"http://{listen}", "failure_domain": "rack1"},
    )
    data["tiers"].insert(1, {"name": "peers", "kind": "peer", "path": str(tmp_path / "peer")})
    daemon = launch_daemon(tmp_path, data)
    body = os.urandom(9 * 1024 * 1024 + 3)
    url = f"{daemon.url}/v1/peer/node-b/42/files/step_3/__1_0.distcp"
    peer = {"Authorization": "Bearer p-token"}
    with httpx.Client(timeout=30) as client:
        tampered = body[:-1] + bytes([body[-1] ^ 0xFF])
        refused = client.put(url, content=tampered, headers={**peer, "x-tierd-crc64nvme": crc(body)})
        assert refused.status_code == 422, refused.text
        put = client.put(url, content=body, headers={**peer, "x-tierd-crc64nvme": crc(body)})
        assert put.status_code == 201, put.text
        assert client.get(url, headers=peer).content == body
        assert client.get(url, headers={"Authorization": "Bearer r-token"}).status_code == 403
        fleet = client.get(f"{daemon.url}/v1/fleet", headers={"Authorization": "Bearer r-token"}).json()
    assert (tmp_path / "peer/node-b/42/step_3/__1_0.distcp").read_bytes() == body
    assert [p.name for p in (tmp_path / "peer/node-b/42/step_3").iterdir()] == ["__1_0.distcp"]
    (node,) = fleet["nodes"]
    assert (node["advertise_url"], node["failure_domain"]) == (f"http://{listen}", "rack1")
