"""Where a part's bytes come from when it is sent: tier 0, else this node's next own tier.

A RAM tier 0 releases a step once its NVMe and peer copies allow; when a peer copy is
written off afterwards, the part is sent again from the NVMe tier, not given up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.harness import crc
from tierd.config import PosixTier
from tierd.daemon.backends import Backend, make_backend
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.replication.sender import PartSender
from tierd.daemon.transfer.spec import FileSpec
from tierd.errors import IntegrityError, NotFound

DATA = b"shard bytes " * 1000


@pytest.fixture
async def tiers(tmp_path: Path) -> AsyncIterator[list[Backend]]:
    made = []
    for name in ("ram", "nvme"):
        (tmp_path / name).mkdir()
        made.append(make_backend(PosixTier(name=name, kind="posix", path=tmp_path / name)))
    yield made
    for backend in made:
        await backend.close()


def _sender(sources: list[Backend]) -> PartSender:
    me = PeerNode("node0", "http://127.0.0.1:1", None)
    return PartSender(None, me, sources, None, 1, asyncio.Semaphore(1))  # type: ignore[arg-type]


def _put(root: Path, relpath: str, data: bytes) -> None:
    (root / relpath).parent.mkdir(parents=True, exist_ok=True)
    (root / relpath).write_bytes(data)


async def _read(sender: PartSender, spec: FileSpec) -> bytes:
    reader = await sender._open(spec)
    try:
        buf = bytearray(reader.size)
        got = await reader.read_into(0, memoryview(buf))
        return bytes(buf[:got])
    finally:
        await reader.close()


async def test_tier0_first_then_the_next_own_tier(tmp_path: Path, tiers: list[Backend]) -> None:
    spec = FileSpec("run/step_1/__0_0.distcp", len(DATA), crc(DATA), 0)
    _put(tmp_path / "nvme", spec.relpath, DATA)
    assert await _read(_sender(tiers), spec) == DATA  # released from RAM: read from the NVMe
    _put(tmp_path / "ram", spec.relpath, DATA[::-1])
    assert await _read(_sender(tiers), spec) == DATA[::-1]  # tier 0 first while it has it


async def test_none_has_it_or_a_size_differs(tmp_path: Path, tiers: list[Backend]) -> None:
    spec = FileSpec("run/step_1/__0_0.distcp", len(DATA), crc(DATA), 0)
    with pytest.raises(NotFound):
        await _sender(tiers)._open(spec)
    _put(tmp_path / "nvme", spec.relpath, DATA[:-1])
    with pytest.raises(IntegrityError, match="recorded at first sight"):
        await _sender(tiers)._open(spec)
