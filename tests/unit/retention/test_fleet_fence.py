"""Retention in a fleet: shared tiers only on the leader, fenced right before the bytes go;
node-local tiers on every daemon, for its own steps (SQLite and PostgreSQL)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from structlog.testing import capture_logs

from tests.fixtures.world import BASE, World, posix_tier
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint
from tierd.daemon.retention import deleter as deleter_module
from tierd.daemon.retention.deleter import NOT_LEADER
from tierd.daemon.transfer import recheck

EVERYWHERE = {"nvme": "verified", "pfs": "verified", "object": "verified"}
LATER = BASE.replace(year=2027)
MIB = 1024 * 1024


def world(tmp_path: Path, db: Database, **top: Any) -> World:
    tiers = [
        posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
        posix_tier(tmp_path, "pfs", retention={"keep_last": 1}, delete_delay=0),
        posix_tier(tmp_path, "object"),
    ]
    return World.make(tmp_path, db, tiers, node="here", **top)


async def test_a_daemon_that_does_not_lead_leaves_shared_tiers_alone_and_keeps_its_own(
    tmp_path: Path, db: Database
) -> None:
    w = world(tmp_path, db)
    w.service.ctx.leader = False
    old, new = [await w.add(step, on=EVERYWHERE) for step in (1, 2)]
    report = await w.service.run_pass(LATER)
    assert w.states(old) == {"nvme": "deleted", "pfs": "verified", "object": "verified"}
    assert w.exists("pfs", old)
    assert not w.exists("nvme", old)
    assert [o.result for o in report.outcomes] == ["deleted"]  # no refusal, no failure
    assert ("deletion_scheduled", "pfs") not in w.actions(old)

    w.service.ctx.leader = True
    w.service.wake()
    await w.service.run_pass(LATER)
    assert w.states(old)["pfs"] == "deleted"
    assert not w.exists("pfs", old)
    assert w.states(new) == EVERYWHERE


async def test_a_leader_that_loses_the_lease_during_the_recheck_does_not_delete(
    tmp_path: Path, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence right before the bytes go: leadership lost meanwhile (a pause) wins."""
    w = world(tmp_path, db)
    ctx = w.service.ctx
    old, _ = [await w.add(step, on={"pfs": "verified", "object": "verified"}) for step in (1, 2)]
    real = recheck.recheck_replica

    async def recheck_then_pause(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        ctx.leader = False  # e.g. SIGSTOP here, resumed after the lease passed to another daemon
        return result

    monkeypatch.setattr(deleter_module, "recheck_replica", recheck_then_pause)
    with capture_logs() as logs:
        report = await w.service.run_pass(LATER)
    assert [(o.result, o.detail) for o in report.outcomes] == [("skipped", NOT_LEADER)]
    assert w.exists("pfs", old)
    replica = w.replica(old, "pfs")
    assert (replica.state, replica.delete_after) == ("deleting", None)  # begun: the leader finishes it
    assert [e["event"] for e in logs if e["event"] in ("leader_acts", "deletion_left_to_leader")] == [
        "deletion_left_to_leader"
    ]

    monkeypatch.setattr(deleter_module, "recheck_replica", real)
    ctx.leader = True
    with capture_logs() as logs:
        report = await w.service.run_pass(LATER)
    assert [o.result for o in report.outcomes] == ["deleted"]
    assert w.states(old)["pfs"] == "deleted"
    assert not w.exists("pfs", old)
    assert [e["tier"] for e in logs if e["event"] == "leader_acts"] == ["pfs"]


async def test_in_a_fleet_a_node_deletes_only_its_own_steps_from_node_local_tiers(
    tmp_path: Path, db: Database
) -> None:
    w = world(tmp_path, db)
    ours = [await w.add(step, on=EVERYWHERE) for step in (1, 2)]
    theirs = [await w.add(step, on=EVERYWHERE, run="elsewhere") for step in (1, 2)]
    with db.session() as s:
        s.execute(update(Checkpoint).where(Checkpoint.id.in_(ours)).values(node="here"))
        s.execute(update(Checkpoint).where(Checkpoint.id.in_(theirs)).values(node="there"))
    await w.service.run_pass(LATER)
    assert w.states(ours[0])["nvme"] == "deleted"
    # On PostgreSQL (a fleet) another node's NVMe is its own business; SQLite has one node.
    assert w.states(theirs[0])["nvme"] == ("deleted" if db.is_sqlite else "verified")
    assert w.states(theirs[0])["pfs"] == "deleted"  # shared: the leader (this daemon) does it


@pytest.fixture
def small_shared_fs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs at tmp_path/pfs (the shared tier), unmounted afterwards."""
    mount = tmp_path / "pfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=False)
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


async def test_only_the_leader_evicts_from_a_shared_tier_under_pressure(
    small_shared_fs: Path, tmp_path: Path, sqlite_db: Database
) -> None:
    tiers = [
        posix_tier(tmp_path, "nvme"),
        posix_tier(tmp_path, "pfs", free_space={"evict_below": "40%", "evict_to": "60%"}),
        posix_tier(tmp_path, "object"),
    ]
    w = World.make(tmp_path, sqlite_db, tiers)
    ids = [await w.add(step, on=EVERYWHERE, size=MIB) for step in range(1, 7)]
    w.service.ctx.leader = False
    await w.service.run_pass(LATER)
    assert all(w.states(i)["pfs"] == "verified" for i in ids)  # another daemon's job
    room = await w.service.pressure.reserve("pfs", MIB)
    assert not room.ok
    assert room.evicted == ()

    w.service.ctx.leader = True
    await w.service.run_pass(LATER)
    assert w.states(ids[0])["pfs"] == "deleted"
    assert not w.exists("pfs", ids[0])
    assert w.states(ids[-1])["pfs"] == "verified"
