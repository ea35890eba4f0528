"""Disk pressure and reservations on a real, small file system (a tmpfs mounted for the test)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.world import LATER_DAY, World, posix_tier
from tierd.daemon.catalog import protection
from tierd.daemon.catalog.db import Database
from tierd.daemon.tierview import FreeSpaceMarks, tier_views

MIB = 1024 * 1024
BOTH = {"nvme": "verified", "pfs": "verified"}


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs at tmp_path/nvme, unmounted afterwards."""
    mount = tmp_path / "nvme"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=False)
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def pressured(tmp_path: Path, db: Database) -> World:
    tiers = [
        posix_tier(tmp_path, "nvme", free_space={"evict_below": "40%", "evict_to": "60%"}),
        posix_tier(tmp_path, "pfs"),
    ]
    return World.make(tmp_path, db, tiers)


async def test_eviction_frees_only_what_is_durable_elsewhere(
    small_fs: Path, tmp_path: Path, sqlite_db: Database
) -> None:
    w = pressured(tmp_path, sqlite_db)
    held = await w.add(1, on=BOTH, size=MIB)
    oldest = await w.add(2, on=BOTH, size=MIB)
    not_durable = await w.add(3, on={"nvme": "verified", "pfs": "copying"}, size=MIB)
    middle = [await w.add(step, on=BOTH, size=MIB) for step in (4, 5)]
    newest = await w.add(6, on=BOTH, size=MIB)
    with sqlite_db.session() as s:
        protection.add_hold(s, held, name="audit", reason="legal", actor="admin")
    space = await w.backends["nvme"].space()
    assert space is not None
    assert space.free < 0.4 * space.total  # 6 steps of 3 files, 2 MiB each, fill 12 of 16 MiB

    await w.service.run_pass(LATER_DAY)

    assert w.states(oldest)["nvme"] == "deleted"
    assert not w.exists("nvme", oldest)
    for kept in (held, not_durable, newest):
        assert w.states(kept)["nvme"] == "verified"
        assert w.exists("nvme", kept)
    assert ("evicted", "nvme") in w.actions(oldest)
    after = await w.backends["nvme"].space()
    assert after is not None
    evicted = [i for i in middle if w.states(i)["nvme"] == "deleted"]
    assert after.free >= 0.6 * after.total or len(evicted) == len(middle)
    assert w.service.ctx.metrics.evictions.labels("nvme")._value.get() == 1 + len(evicted)


async def test_nothing_evictable_is_said_loudly_and_deletes_nothing(
    small_fs: Path, tmp_path: Path, sqlite_db: Database
) -> None:
    w = pressured(tmp_path, sqlite_db)
    ids = [await w.add(step, on={"nvme": "verified", "pfs": "pending"}, size=MIB) for step in range(1, 7)]
    await w.service.run_pass(LATER_DAY)
    assert all(w.states(i)["nvme"] == "verified" for i in ids)
    blocked = w.service.blocked  # what /v1/tiers and /readyz show
    assert list(blocked) == ["nvme"]
    assert "without a verified copy on another durable tier" in blocked["nvme"]
    space = await w.service.space("nvme")
    assert space is not None
    assert space.free < 0.4 * space.total
    w.service.ctx.retention = w.service
    nvme = (await tier_views(w.service.ctx))[0]  # GET /v1/tiers
    assert (nvme.pressure_blocked, nvme.free_space) == (blocked["nvme"], FreeSpaceMarks("40%", "60%"))
    registry = w.service.ctx.metrics.registry
    assert registry.get_sample_value("tierd_tier_pressure_blocked", {"tier": "nvme"}) == 1
    assert registry.get_sample_value("tierd_tier_free_bytes", {"tier": "nvme"}) == pytest.approx(
        space.free, rel=0.01
    )


async def test_reservation_evicts_then_answers(small_fs: Path, tmp_path: Path, sqlite_db: Database) -> None:
    w = pressured(tmp_path, sqlite_db)
    ids = [await w.add(step, on=BOTH, size=MIB // 2) for step in range(1, 5)]
    room = await w.service.reserve("nvme", 4 * MIB)
    assert room.ok
    assert room.evicted == ()  # 4 MiB used of 16: 4 MiB + the 40 % mark fit without evicting
    room = await w.service.reserve("nvme", 8 * MIB)
    assert room.ok
    assert room.evicted
    assert all(w.states(i)["nvme"] == "deleted" for i in room.evicted)
    assert ids[-1] not in room.evicted  # the newest step of the run stays
    room = await w.service.reserve("nvme", 15 * MIB)
    assert not room.ok
    assert "the newest complete step of their run" in room.describe()


async def test_a_reservation_that_cannot_fit_evicts_nothing(
    small_fs: Path, tmp_path: Path, sqlite_db: Database
) -> None:
    w = pressured(tmp_path, sqlite_db)
    ids = [await w.add(step, on=BOTH, size=MIB // 2) for step in range(1, 5)]
    room = await w.service.reserve("nvme", 64 * MIB)
    assert not room.ok
    assert room.evicted == ()
    assert all(w.states(i)["nvme"] == "verified" for i in ids)


async def test_dry_run_reservations_evict_nothing(
    small_fs: Path, tmp_path: Path, sqlite_db: Database
) -> None:
    tiers = [
        posix_tier(tmp_path, "nvme", free_space={"evict_below": "40%", "evict_to": "60%"}),
        posix_tier(tmp_path, "pfs"),
    ]
    w = World.make(tmp_path, sqlite_db, tiers, retention={"dry_run": True})
    ids = [await w.add(step, on=BOTH, size=MIB // 2) for step in range(1, 5)]
    room = await w.service.reserve("nvme", 8 * MIB)
    assert not room.ok
    assert room.evicted == ()
    assert all(w.states(i)["nvme"] == "verified" for i in ids)
