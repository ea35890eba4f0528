"""A restore's reads of a peer's copy, over real HTTP against the real app: ranged GETs, and the
errors that send a restore to its next source (a holder away or refusing the token) or call the
copy bad (not held)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.api.test_peer import PEER, Served, serve
from tests.fixtures.net import free_port
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.fetch import PeerFetch, PeerUnavailable
from tierd.daemon.catalog.db import Database
from tierd.errors import NotFound

RELPATH = "step-7/__0_0.distcp"
FILE = f"/v1/peer/node-a/7/files/{RELPATH}"


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    async for s in serve(tmp_path, sqlite_db):
        yield s


def _holder(served: Served) -> PeerNode:
    return PeerNode("b", f"http://127.0.0.1:{served.port}")


async def test_a_held_file_is_read_back_in_ranges_in_any_order(served: Served) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    assert (await served.put(data, FILE)).status_code == 201
    fetch = PeerFetch("p-token")
    try:
        source = fetch.source(_holder(served), 7, {RELPATH: "node-a"})
        assert (await source.stat(RELPATH)).size == len(data)
        reader = await source.open_reader(RELPATH)
        got = bytearray(len(data))
        chunk = 1024 * 1024
        for offset in reversed(range(0, len(data), chunk)):  # as parallel chunks may come
            n = await reader.read_into(offset, memoryview(got)[offset : offset + chunk])
            assert n == min(chunk, len(data) - offset)
        assert bytes(got) == data
        whole = bytearray(len(data))
        assert await source.read_whole([RELPATH], [memoryview(whole)]) == [None]
        assert bytes(whole) == data
        with pytest.raises(NotFound):
            await source.open_reader("step-7/__1_0.distcp")  # a file it holds no copy of
    finally:
        await fetch.close()


async def test_a_range_answers_206_and_a_range_outside_the_file_416(served: Served) -> None:
    data = os.urandom(1000)
    assert (await served.put(data, FILE)).status_code == 201
    part = await served.client.get(FILE, headers={**PEER, "Range": "bytes=10-19"})
    assert part.status_code == 206
    assert (part.content, part.headers["content-range"]) == (data[10:20], "bytes 10-19/1000")
    tail = await served.client.get(FILE, headers={**PEER, "Range": "bytes=990-5000"})
    assert (tail.status_code, tail.content) == (206, data[990:])
    for bad in ("bytes=1000-1001", "bytes=5-2", "bytes=0-1,5-6", "items=0-1"):
        refused = await served.client.get(FILE, headers={**PEER, "Range": bad})
        assert refused.status_code == 416, bad
        assert refused.headers["content-type"] == "application/problem+json"


async def test_a_file_not_held_is_not_found_a_bad_copy_for_the_restore(served: Served) -> None:
    fetch = PeerFetch("p-token")
    try:
        with pytest.raises(NotFound):
            await fetch.source(_holder(served), 7, {RELPATH: "node-a"}).open_reader(RELPATH)
        assert fetch.down == {}
    finally:
        await fetch.close()


async def test_a_refused_token_passes_the_holder_over_and_it_is_not_asked_again(served: Served) -> None:
    assert (await served.put(b"x" * 100, FILE)).status_code == 201
    fetch = PeerFetch("a-token")  # an admin token is no peer token
    try:
        source = fetch.source(_holder(served), 7, {RELPATH: "node-a"})
        with pytest.raises(PeerUnavailable, match="403"):
            await source.open_reader(RELPATH)
        assert set(fetch.down) == {"b"}
        with pytest.raises(PeerUnavailable, match="passed over"):
            await source.stat(RELPATH)
        forked = fetch.fork()  # the next restore asks again
        assert forked.down == {}
        await forked.close()
        with pytest.raises(PeerUnavailable, match="403"):
            await fetch.fork().source(_holder(served), 7, {RELPATH: "node-a"}).stat(RELPATH)
    finally:
        await fetch.close()


async def test_a_dead_holder_is_passed_over_at_once() -> None:
    fetch = PeerFetch("p-token", connect_timeout=0.5)
    dead = PeerNode("gone", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    try:
        with pytest.raises(PeerUnavailable, match="ConnectError"):
            await fetch.source(dead, 7, {RELPATH: "node-a"}).open_reader(RELPATH)
        assert set(fetch.down) == {"gone"}
    finally:
        await fetch.close()
