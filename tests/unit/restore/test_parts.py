"""Restoring a step written by several nodes, on one node (SQLite and PostgreSQL).

Its node-local tier 0 holds only its own part: the restore reads that part from tier 0 and
every other file from the nearest shared tier, with no fallback and without marking tier 0
failed, with ``ranks`` and without.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from tests.fixtures.parts_fleet import FleetCopy, part_states
from tests.unit.detect.fleet import step_row
from tierd.daemon.backends import Backend, make_backend
from tierd.daemon.catalog import restores
from tierd.daemon.catalog.jobs import owner_id
from tierd.daemon.catalog.models import Replica, utcnow
from tierd.daemon.context import Context
from tierd.daemon.restore.requests import RestoreRequest, request_restore
from tierd.daemon.restore.runner import RestoreOptions, RestoreRunner
from tierd.daemon.restore.source import Rebased
from tierd.daemon.transfer.retry import Backoff

FAST = RestoreOptions(poll_interval=0.05, progress_interval=0.02, file_backoff=Backoff(0.0, 0.0))


class Reads(Rebased):
    """A tier that remembers which files were read from it."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner, "")
        self.read: set[str] = set()

    async def open_reader(self, relpath: str) -> Any:
        self.read.add(relpath.rsplit("/", 1)[-1])
        return await super().open_reader(relpath)

    async def read_whole(self, relpaths: Sequence[str], views: Sequence[memoryview]) -> Any:
        self.read.update(r.rsplit("/", 1)[-1] for r in relpaths)
        return await super().read_whole(relpaths, views)


async def _restore(ctx: Context, target: Path, **fields: Any) -> tuple[restores.RestoreRow, Reads]:
    row = step_row(ctx.db, 2)
    assert row is not None
    job_id = request_restore(
        ctx.db, ctx.config, RestoreRequest(checkpoint_id=row.id, target=str(target), **fields), actor="test"
    )
    owner = owner_id(ctx.config.node)
    claim = restores.claim_next_restore(ctx.db, owner, ctx.config.node, lease_seconds=60, now=utcnow())
    assert claim is not None
    backends = {t.name: make_backend(t) for t in ctx.config.tiers}
    nvme = Reads(backends["nvme"])
    runner = RestoreRunner(
        config=ctx.config,
        db=ctx.db,
        backends={**backends, "nvme": nvme},
        budget=None,
        owner=owner,
        claim=claim,
        options=FAST,
        wake_pipeline=lambda: None,
    )
    await runner.run()
    with ctx.db.read_session() as session:
        return restores.get_restore(session, job_id), nvme


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir()}


@pytest.mark.parametrize("ranks", [None, [0]], ids=["whole", "ranks"])
async def test_a_node_reads_its_own_part_from_tier_0_and_the_rest_from_a_shared_tier(
    parts_fleet: FleetCopy, ranks: list[int] | None
) -> None:
    n1 = parts_fleet.nodes[1]
    target = parts_fleet.root / "restores" / "n1"
    row, nvme = await _restore(n1, target, ranks=ranks)
    assert (row.job.state, row.job.last_error) == ("done", None)
    whole = _files(parts_fleet.root / "shared" / "pfs" / "demo" / "step_2")
    # DCP in one process names every shard rank 0: rank 0 takes them all, and .metadata.
    assert _files(target) == whole
    own = {p.name for p in (n1.config.watch[0].path / "step_2").iterdir()}
    assert nvme.read == own, "tier 0 is read for this node's part only"
    assert row.job.detail["fallbacks"] == []
    assert part_states(n1.db, 2) == ("verified", {"n0": "verified", "n1": "verified", "n2": "verified"})


async def test_with_only_tier_0_verified_a_node_refuses_what_other_nodes_hold(parts_fleet: FleetCopy) -> None:
    n1 = parts_fleet.nodes[1]
    row = step_row(n1.db, 2)
    assert row is not None
    with n1.db.session() as session:
        session.execute(
            update(Replica)
            .where(Replica.checkpoint_id == row.id, Replica.tier != "nvme")
            .values(state="pending")
        )
    target = parts_fleet.root / "restores" / "refused"
    restore, nvme = await _restore(n1, target)
    assert restore.job.state == "failed"
    assert "other nodes' parts, on no shared tier verified yet" in (restore.job.last_error or "")
    assert nvme.read == set()
    assert not target.exists()
    assert part_states(n1.db, 2) == ("verified", {"n0": "verified", "n1": "verified", "n2": "verified"})


async def test_a_bad_file_of_this_nodes_part_falls_back_and_fails_that_part_only(
    parts_fleet: FleetCopy,
) -> None:
    n1 = parts_fleet.nodes[1]
    shard = next((n1.config.watch[0].path / "step_2").iterdir())
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    target = parts_fleet.root / "restores" / "fallback"
    restore, _ = await _restore(n1, target)
    assert restore.job.state == "done"
    assert _files(target) == _files(parts_fleet.root / "shared" / "pfs" / "demo" / "step_2")
    [fallback] = restore.job.detail["fallbacks"]
    assert (fallback["file"], fallback["from_tier"], fallback["to_tier"]) == (shard.name, "nvme", "pfs")
    assert part_states(n1.db, 2) == ("failed", {"n0": "verified", "n1": "failed", "n2": "verified"})
