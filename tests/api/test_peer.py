"""``/v1/peer``: another node's file held here, over real HTTP, with the ``peer`` role only.

The upload streams to a temporary name and is renamed only once its bytes hash to the
CRC64NVME the sender declared; whatever goes wrong (a mismatch, a sender gone mid-body, a
declared size the directory has no room for) leaves no file behind.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fixtures.world import World, crc, posix_tier
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.daemon.backends.peer import PeerStore
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Part, ReplicaState
from tierd.daemon.catalog.peer_copies import mark_peer_copy

PEER = {"Authorization": "Bearer p-token"}
ADMIN = {"Authorization": "Bearer a-token"}
PROBLEM = "application/problem+json"
TOKENS = [
    {"name": "node-b", "token": "p-token", "role": "peer"},
    {"name": "root", "token": "a-token", "role": "admin"},
]
FILE = "/v1/peer/node-a/7/files/step-7/__0_0.distcp"


@dataclass
class Served:
    client: httpx.AsyncClient
    port: int
    peer_dir: Path
    store: PeerStore
    world: World

    async def put(self, data: bytes, path: str = FILE, checksum: str | None = None) -> httpx.Response:
        headers = {**PEER, "x-tierd-crc64nvme": checksum or crc(data)}
        return await self.client.put(path, content=data, headers=headers)

    def held(self) -> list[str]:
        """Every file under the peer directory, temporary names included."""
        return sorted(
            os.path.relpath(os.path.join(top, name), self.peer_dir)
            for top, _, names in os.walk(self.peer_dir)
            for name in names
        )


async def serve(tmp_path: Path, db: Database, **peer: object) -> AsyncIterator[Served]:
    peer_dir = tmp_path / "peer"
    tiers = [
        posix_tier(tmp_path, "nvme"),
        {"name": "peers", "kind": "peer", "path": str(peer_dir), "concurrency": 1, **peer},
        posix_tier(tmp_path, "pfs"),
    ]
    world = World.make(tmp_path, db, tiers, api={"listen": "127.0.0.1:0", "tokens": TOKENS})
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
        yield Served(client, api.port, peer_dir, api.app.state.peer, world)
    await api.stop(5)


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    async for s in serve(tmp_path, sqlite_db):
        yield s


async def test_a_file_is_held_given_back_and_removed(served: Served) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    answer = await served.put(data)
    assert answer.status_code == 201, answer.text
    assert answer.json() == {
        "node": "node-a",
        "checkpoint_id": 7,
        "relpath": "step-7/__0_0.distcp",
        "size": len(data),
        "checksum": crc(data),
    }
    assert served.held() == ["node-a/7/step-7/__0_0.distcp"]
    assert (served.peer_dir / "node-a/7/step-7/__0_0.distcp").read_bytes() == data
    assert (served.peer_dir.stat().st_mode & 0o777) == 0o700
    head = await served.client.head(FILE, headers=PEER)
    assert head.status_code == 200
    assert head.headers["content-length"] == str(len(data))
    got = await served.client.get(FILE, headers=PEER)
    assert got.status_code == 200
    assert got.content == data
    gone = await served.client.delete("/v1/peer/node-a/7", headers=PEER)
    assert gone.status_code == 200
    assert gone.json() == {"removed": 1}
    assert served.held() == []
    missing = await served.client.get(FILE, headers=PEER)
    assert missing.status_code == 404
    assert missing.headers["content-type"] == PROBLEM


async def test_a_body_that_does_not_hash_to_its_checksum_is_refused_and_leaves_nothing(
    served: Served,
) -> None:
    data = os.urandom(1024 * 1024)
    tampered = bytearray(data)
    tampered[1234] ^= 0x01
    answer = await served.put(bytes(tampered), checksum=crc(data))
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == PROBLEM
    assert "refused, nothing kept" in answer.json()["detail"]
    assert served.held() == []
    resent = await served.put(data)
    assert resent.status_code == 201, resent.text
    assert served.held() == ["node-a/7/step-7/__0_0.distcp"]


async def test_only_a_peer_token_may_and_it_may_do_nothing_else(served: Served) -> None:
    data = b"x" * 100
    for headers, status in (({**ADMIN}, 403), ({"Authorization": "Bearer wrong"}, 401), ({}, 401)):
        answer = await served.client.put(
            FILE, content=data, headers={**headers, "x-tierd-crc64nvme": crc(data)}
        )
        assert answer.status_code == status, answer.text
    assert (await served.client.get(FILE, headers=ADMIN)).status_code == 403
    for path in ("/v1/checkpoints", "/v1/fleet", "/v1/tiers"):
        assert (await served.client.get(path, headers=PEER)).status_code == 403, path
    assert served.held() == []


@pytest.mark.parametrize(
    ("path", "checksum", "status"),
    [
        ("/v1/peer/node-a/7/files/a/%2E%2E/%2E%2E/x", None, 422),
        ("/v1/peer/node-a/7/files/a//x", None, 422),
        ("/v1/peer/..hidden/7/files/x", None, 422),
        ("/v1/peer/node-a/0/files/x", None, 422),
        (FILE, "not-a-crc", 422),
    ],
)
async def test_a_malformed_name_or_checksum_is_refused_before_the_body(
    served: Served, path: str, checksum: str | None, status: int
) -> None:
    answer = await served.put(b"abc", path=path, checksum=checksum)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    assert served.held() == []


async def test_a_chunked_body_without_a_declared_size_is_refused(served: Served) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"abc"

    headers = {**PEER, "x-tierd-crc64nvme": crc(b"abc")}
    answer = await served.client.put(FILE, content=body(), headers=headers)
    assert answer.status_code == 411, answer.text
    assert served.held() == []


async def _raw(port: int, head: str, body: bytes = b"", *, close_after: bool = False) -> bytes:
    """Send ``head`` and ``body`` over a raw connection; the answer (b"" when closed first)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        await writer.drain()
        if close_after:
            return b""
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


def _head(length: int, checksum: str) -> str:
    return (
        f"PUT {FILE} HTTP/1.1\nHost: x\nAuthorization: Bearer p-token\n"
        f"x-tierd-crc64nvme: {checksum}\nContent-Length: {length}\nConnection: close\n"
    )


@pytest.mark.parametrize(("length", "status"), [(15 * 2**40, b"507"), (17 * 2**40, b"413")])
async def test_a_declared_size_past_the_room_or_the_bound_is_refused_before_a_byte_is_read(
    served: Served, length: int, status: bytes
) -> None:
    answer = await _raw(served.port, _head(length, crc(b"")))
    assert answer.split(b" ", 2)[1] == status, answer[:300]
    assert served.held() == []


async def test_a_sender_gone_mid_body_leaves_nothing(served: Served) -> None:
    data = os.urandom(20 * 1024 * 1024)  # past one 8 MiB chunk: its temporary file is written to
    await _raw(served.port, _head(len(data), crc(data)), data[: 12 * 1024 * 1024], close_after=True)
    deadline = asyncio.get_running_loop().time() + 20
    # Its directory shows the write began, a free slot that it ended (concurrency 1 here).
    while not (served.peer_dir / "node-a/7/step-7").exists() or served.store.slots.locked():
        assert asyncio.get_running_loop().time() < deadline, served.held()
        await asyncio.sleep(0.02)
    assert served.held() == []
    answer = await served.put(data)
    assert answer.status_code == 201, answer.text


async def test_a_full_peer_directory_says_so(tmp_path: Path, sqlite_db: Database) -> None:
    """``free_space.evict_below`` above what the disk has: every file is refused (507), visibly."""
    marks = {"evict_below": "1000000TB", "evict_to": "1000001TB"}
    async for served in serve(tmp_path, sqlite_db, free_space=marks):
        answer = await served.put(b"abc")
        assert answer.status_code == 507, answer.text
        assert "free_space.evict_below" in answer.json()["detail"]
        assert served.held() == []


async def test_a_node_without_a_peer_tier_holds_nothing(tmp_path: Path, sqlite_db: Database) -> None:
    world = World.make(
        tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme")], api={"listen": "127.0.0.1:0", "tokens": TOKENS}
    )
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}") as client:
            answer = await client.put(
                FILE, content=b"abc", headers={**PEER, "x-tierd-crc64nvme": crc(b"abc")}
            )
    finally:
        await api.stop(5)
    assert answer.status_code == 404
    assert "no peer tier" in answer.json()["detail"]


async def test_a_checkpoint_says_whether_one_nodes_loss_loses_it(served: Served) -> None:
    """``node_loss`` in ``GET /v1/checkpoints/{id}``: safe once every part is verified elsewhere."""
    checkpoint_id = await served.world.add(1, on={"nvme": "verified", "pfs": "copying"})
    db = served.world.db
    with db.session() as s:
        parts = [Part(checkpoint_id=checkpoint_id, node=n) for n in ("node-a", "node-b")]
        s.add_all(parts)
        s.flush()
        mark_peer_copy(s, parts[0].id, "node-b", ReplicaState.VERIFIED)
        mark_peer_copy(s, parts[1].id, "node-a", ReplicaState.COPYING)
        second = parts[1].id
    read = {"Authorization": "Bearer a-token"}
    answer = (await served.client.get(f"/v1/checkpoints/{checkpoint_id}", headers=read)).json()
    assert answer["node_loss"] == {
        "safe": False,
        "since": None,
        "peer_copies": [
            {"node": "node-a", "holder": "node-b", "state": "verified"},
            {"node": "node-b", "holder": "node-a", "state": "copying"},
        ],
    }
    with db.session() as s:
        mark_peer_copy(s, second, "node-a", ReplicaState.VERIFIED)
    answer = (await served.client.get(f"/v1/checkpoints/{checkpoint_id}", headers=read)).json()
    assert answer["node_loss"]["safe"] is True
    assert answer["node_loss"]["since"] is not None
    metrics = (await served.client.get("/metrics")).text
    assert "\ntierd_node_loss_recovery_point_age_seconds " in metrics
