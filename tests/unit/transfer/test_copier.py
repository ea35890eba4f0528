"""Per-file checks on top of the backends: read-back for ``verify: readback`` tiers, skipping
files an interrupted run already stored, and the bandwidth cap on the bytes read."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tierd.daemon.backends.base import BytesReader, Features, ObjectInfo
from tierd.daemon.transfer.copier import ThrottledReader, already_there, confirm
from tierd.daemon.transfer.spec import FileSpec
from tierd.daemon.transfer.throttle import TokenBucket
from tierd.errors import IntegrityError, NotFound

SPEC = FileSpec("r/s1/a", 10, "GOOD", 0)


@dataclass
class StubStore:
    """Just enough of a Backend for the checks under test."""

    features: Features = field(default_factory=lambda: Features(False, False, False))
    stored: ObjectInfo | None = None
    readback: str = "GOOD"
    deleted: list[str] = field(default_factory=list)
    verified: list[str] = field(default_factory=list)
    name: str = "stub"

    def location(self, relpath: str) -> str:
        return f"stub://{relpath}"

    async def stat(self, relpath: str) -> ObjectInfo:
        if self.stored is None:
            raise NotFound(relpath)
        return self.stored

    async def hash(self, relpath: str) -> str:
        return self.readback

    async def delete(self, relpath: str) -> None:
        self.deleted.append(relpath)

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        self.verified.append(relpath)
        return ObjectInfo(relpath, 10, expected_checksum, None, "readback")


async def test_readback_tiers_read_back_what_the_store_vouched_for() -> None:
    store = StubStore(readback="BAD")
    info = ObjectInfo("r/s1/a", 10, "GOOD", None, "store")
    with pytest.raises(IntegrityError, match="read-back"):
        await confirm(store, SPEC, info, readback=True)  # type: ignore[arg-type]
    assert store.deleted == ["r/s1/a"]  # a corrupt copy never stays under its final name
    store.readback = "GOOD"
    confirmed = await confirm(store, SPEC, info, readback=True)  # type: ignore[arg-type]
    assert confirmed.verified_by == "readback"


async def test_unverified_writes_are_verified_and_mismatches_refused() -> None:
    store = StubStore()
    unchecked = ObjectInfo("r/s1/a", 10, None, None, None)
    assert (await confirm(store, SPEC, unchecked, readback=False)).checksum == "GOOD"  # type: ignore[arg-type]
    assert store.verified == ["r/s1/a"]
    wrong = ObjectInfo("r/s1/a", 10, "OTHER", None, "store")
    with pytest.raises(IntegrityError):
        await confirm(store, SPEC, wrong, readback=False)  # type: ignore[arg-type]


async def test_already_there() -> None:
    posix = StubStore(stored=ObjectInfo("r/s1/a", 10, None, None))
    assert await already_there(posix, SPEC, recorded_done=True)  # type: ignore[arg-type]
    # finished by a run that could not record it (the catalog was away): read back and hashed
    assert await already_there(posix, SPEC, recorded_done=False)  # type: ignore[arg-type]
    posix.readback = "OTHER"
    assert not await already_there(posix, SPEC, recorded_done=False)  # type: ignore[arg-type]
    posix.stored = ObjectInfo("r/s1/a", 9, None, None)
    assert not await already_there(posix, SPEC, recorded_done=True)  # type: ignore[arg-type]
    s3 = StubStore(features=Features(True, True, True), stored=ObjectInfo("r/s1/a", 10, "GOOD", None))
    assert await already_there(s3, SPEC, recorded_done=False)  # type: ignore[arg-type]
    s3.stored = ObjectInfo("r/s1/a", 10, "STALE", None)
    assert not await already_there(s3, SPEC, recorded_done=False)  # type: ignore[arg-type]
    s3.stored = ObjectInfo("r/s1/a", 10, None, None)  # a store that reports no checksum for it
    assert await already_there(s3, SPEC, recorded_done=False)  # type: ignore[arg-type]
    s3.stored = None
    assert not await already_there(s3, SPEC, recorded_done=True)  # type: ignore[arg-type]


async def test_throttled_reader_pays_for_what_it_read() -> None:
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    bucket = TokenBucket(100.0, burst=0.0, clock=lambda: now[0], sleep=sleep)
    reader = ThrottledReader(BytesReader(b"x" * 250), bucket, priority=5)
    buf = memoryview(bytearray(100))
    sizes = [await reader.read_into(offset, buf) for offset in (0, 100, 200, 300)]
    assert sizes == [100, 100, 50, 0]
    assert now[0] == pytest.approx(2.0)  # waited for the first 200 bytes; the last 50 are still owed
    assert bucket.tokens == pytest.approx(-50.0)
