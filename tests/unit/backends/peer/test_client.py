"""Sending a part's file to peers over real HTTP: real receivers (the API with a peer tier) on
their own loopback addresses, one dead, one full, a byte changed in flight."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.fixtures.net import free_port
from tests.fixtures.world import World, crc, posix_tier
from tests.unit.backends.peer.receivers import Receiver
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.daemon.backends import BytesReader, RangeReader
from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.client import PeerClient, PeerFile
from tierd.daemon.catalog.db import Database

TOKENS = [
    {"name": "peers", "token": "p-token", "role": "peer"},
    {"name": "ops", "token": "o-token", "role": "operate"},
]
DATA = os.urandom(5 * 1024 * 1024 + 17)


FILE = PeerFile("node-a", 3, "step_3/__0_0.distcp", crc(DATA))


@pytest.fixture
async def receivers(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[list[Receiver]]:
    """node-b (full: its free_space mark is above the disk), node-c (fine); node-d is dead."""
    started: list[ApiService] = []
    found: list[Receiver] = []
    for index, name in enumerate(("node-b", "node-c")):
        root = tmp_path / name
        peer: dict[str, object] = {"name": "peers", "kind": "peer", "path": str(root / "peer")}
        if name == "node-b":
            peer["free_space"] = {"evict_below": "1000000TB", "evict_to": "1000001TB"}
        world = World.make(root, sqlite_db, [posix_tier(root, "nvme"), peer], api={"tokens": TOKENS})
        host = f"127.0.0.{index + 2}"
        api = ApiService(create_app(world.service.ctx), host, 0)
        await api.start()
        started.append(api)
        found.append(Receiver(PeerNode(name, f"http://{host}:{api.port}", "rack2"), root / "peer"))
    found.append(Receiver(PeerNode("node-d", f"http://127.0.0.4:{free_port()}", "rack3"), tmp_path / "none"))
    yield found
    for api in started:
        await api.stop(5)


class Tampered(BytesReader):
    """The file's bytes with one flipped: what a bad NIC or a bad cable would send."""

    def __init__(self, data: bytes) -> None:
        changed = bytearray(data)
        changed[len(data) // 2] ^= 0x40
        super().__init__(bytes(changed))


async def test_a_full_and_a_dead_peer_are_passed_over_and_a_damaged_body_is_resent(
    receivers: list[Receiver],
) -> None:
    full, fine, dead = receivers
    opened: list[RangeReader] = []

    async def open_reader() -> RangeReader:  # one open per try: dead, full, fine (damaged), fine
        reader: RangeReader = Tampered(DATA) if len(opened) == 2 else BytesReader(DATA)
        opened.append(reader)
        return reader

    client = PeerClient("p-token", ByteBudget(4 * 1024 * 1024))
    try:
        with capture_logs() as logs:
            held = await client.replicate([dead.node, full.node, fine.node], 1, FILE, open_reader)
    finally:
        await client.close()
    assert held == [fine.node]
    assert len(opened) == 4
    refused = [(e["peer"], e["status"]) for e in logs if e["event"] == "peer_refused"]
    assert refused == [("node-d", 0), ("node-b", 507), ("node-c", 422)]
    assert full.holds() == []
    assert fine.holds() == ["node-a/3/step_3/__0_0.distcp"]
    assert (fine.peer_dir / "node-a/3/step_3/__0_0.distcp").read_bytes() == DATA


async def test_a_token_of_another_role_is_refused(receivers: list[Receiver]) -> None:
    _, fine, _ = receivers

    async def open_reader() -> RangeReader:
        return BytesReader(DATA)

    client = PeerClient("o-token", ByteBudget(4 * 1024 * 1024))
    try:
        with capture_logs() as logs:
            held = await client.replicate([fine.node], 1, FILE, open_reader)
    finally:
        await client.close()
    assert held == []
    assert [e["status"] for e in logs if e["event"] == "peer_refused"] == [403]
    assert fine.holds() == []
