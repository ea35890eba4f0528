"""A replica the scrub found rotten is copied again, from a LATER tier when no earlier copy is left."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from tests.fixtures.pipeline_run import FAST, run_pipeline_until
from tests.unit.scrub.helpers import flip_byte, relpaths, scrub_world, scrubber
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Job
from tierd.daemon.pipeline.service import PipelineService


async def test_rot_on_tier_1_is_repaired_from_tier_2_after_tier_0_was_deleted(
    tmp_path: Path, sqlite_db: Database
) -> None:
    world = scrub_world(tmp_path, sqlite_db)
    cid = await world.add(1, on={"nvme": "deleted", "pfs": "verified", "archive": "verified"})
    files = relpaths(world, cid)
    good = {r: world.tier_path("archive", r).read_bytes() for r in files}
    flip_byte(world.tier_path("pfs", files[-1]), offset=7)
    ctx = world.service.ctx
    assert await scrubber(world).check_round("pfs") == 1
    assert world.replica(cid, "pfs").state == "failed"

    pipeline = PipelineService(ctx, FAST, backends=world.backends)
    await run_pipeline_until(pipeline, lambda: world.replica(cid, "pfs").state == "verified")

    assert {r: world.tier_path("pfs", r).read_bytes() for r in files} == good
    with sqlite_db.read_session() as s:
        [job] = s.scalars(select(Job).where(Job.checkpoint_id == cid))
        assert (job.src_tier, job.dst_tier, job.state) == ("archive", "pfs", "done")
    assert world.states(cid) == {"nvme": "deleted", "pfs": "verified", "archive": "verified"}
    assert not world.exists("nvme", cid)  # the deleted copy stays deleted
