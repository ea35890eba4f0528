"""A hop's outcome under failures: retries, backoff to a later pass, permanent errors, lost leases.

Real POSIX tiers under tmp_path; the destination backend is wrapped to fail on cue.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.fixtures.pipeline_run import FAST, pipelines_running, poll_until, run_pipeline_until
from tests.integration.daemon_helpers import all_jobs, audit, record_checkpoint, replicas, write_files
from tierd.config import Config, PosixTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import (
    Backend,
    ObjectInfo,
    WriteBatch,
    WriteRequest,
)
from tierd.daemon.backends.posix import batch as posixbatch
from tierd.daemon.backends.posix.backend import PosixBackend, is_temp_name
from tierd.daemon.catalog import jobs
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Job, utcnow
from tierd.daemon.context import Context
from tierd.daemon.pipeline import records
from tierd.daemon.pipeline import runner as runner_module
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.runner import HopRunner, Limits
from tierd.daemon.pipeline.scheduler import schedule_pass
from tierd.daemon.pipeline.service import PipelineService
from tierd.errors import PermanentBackendError, TierdError, TransientBackendError


class Flaky(PosixBackend):
    """A POSIX tier whose writes raise the queued errors first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.errors: list[TierdError] = []
        self.writes = 0
        self.gate: asyncio.Event | None = None
        self.writing = asyncio.Event()  # set once a write began

    def batch(self) -> WriteBatch:
        """No staging: every file goes through ``write`` (and its queued errors)."""
        return WriteBatch(self)

    async def write(self, request: WriteRequest) -> ObjectInfo:
        self.writes += 1
        self.writing.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.errors:
            raise self.errors.pop(0)
        return await super().write(request)


def two_tiers(tmp_path: Path, db: Database) -> Config:
    """nvme -> pfs, both POSIX directories under ``tmp_path``."""
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
    return Config(
        node="n1",
        catalog={"url": db.url},
        tiers=[
            {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
            {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
        ],
    )


@pytest.fixture
def setup(tmp_path: Path, sqlite_db: Database) -> tuple[Config, Database, Flaky, int]:
    config = two_tiers(tmp_path, sqlite_db)
    write_files(tmp_path / "nvme" / "r" / "s1", {"a": 1000, "b": 2000})
    cid = record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    flaky = Flaky(config.tiers[1])
    return config, sqlite_db, flaky, cid


async def _run(config: Config, db: Database, dst: Flaky, until: Callable[[], bool]) -> Context:
    backends: dict[str, Backend] = {"nvme": PosixBackend(config.tier0), "pfs": dst}
    ctx = Context(config=config, db=db)
    await run_pipeline_until(PipelineService(ctx, FAST, backends=backends), until, timeout=20)
    return ctx


async def test_transient_errors_are_retried_within_the_hop(
    setup: tuple[Config, Database, Flaky, int],
) -> None:
    config, db, dst, cid = setup
    dst.errors = [TransientBackendError("503 slow down"), TransientBackendError("timeout")]
    ctx = await _run(config, db, dst, lambda: replicas(db, cid)["pfs"].state == "verified")
    assert dst.writes == 4  # two files, one of them tried three times
    assert [(j.state, j.attempts) for j in all_jobs(db)] == [("done", 0)]
    registry = ctx.metrics.registry
    assert registry.get_sample_value("tierd_transfers_total", {"tier": "pfs", "result": "verified"}) == 1
    assert registry.get_sample_value("tierd_transfer_bytes_total", {"tier": "pfs"}) == 3000
    assert registry.get_sample_value("tierd_transfer_seconds_count", {"tier": "pfs"}) == 1


async def test_exhausted_retries_fail_the_replica_then_a_later_pass_retries(
    setup: tuple[Config, Database, Flaky, int],
) -> None:
    config, db, dst, cid = setup
    dst.errors = [TransientBackendError("503")] * 3  # all of one file's tries
    dst.gate = asyncio.Event()
    seen: list[tuple[str, str | None]] = []

    def record() -> bool:
        row = replicas(db, cid)["pfs"]
        if not seen or seen[-1] != (row.state, row.error):
            seen.append((row.state, row.error))
        dst.gate.set()  # type: ignore[union-attr]
        return row.state == "verified"

    ctx = await _run(config, db, dst, record)
    labels = {"tier": "pfs", "result": "retry"}
    assert ctx.metrics.registry.get_sample_value("tierd_transfers_total", labels) == 1
    assert seen[-1] == ("verified", None)
    # The replica is failed only until the job's backoff (50 ms) ends: the audit trail says
    # so whatever a poll of the state happened to catch on a loaded machine.
    failed, verified = audit(db)
    assert (failed.action, verified.action) == ("replica_failed", "replica_verified")
    assert "TransientBackendError: 503" in failed.reason
    assert failed.detail["retry_at"] is not None
    assert replicas(db, cid)["pfs"].error is None
    [job] = all_jobs(db)  # the same job, retried on a later pass after its not_before
    assert (job.state, job.attempts, job.last_error) == ("done", 1, None)
    assert job.not_before is not None


async def test_permanent_errors_fail_at_once(setup: tuple[Config, Database, Flaky, int]) -> None:
    config, db, dst, cid = setup
    dst.errors = [PermanentBackendError("access denied")]
    await _run(config, db, dst, lambda: replicas(db, cid)["pfs"].state == "failed")
    assert dst.writes <= 2  # no retry of the failed file (the other may have started alongside)
    [job] = all_jobs(db)
    assert (job.state, job.detail["reason"], job.last_error) == (
        "failed",
        "permanent",
        "PermanentBackendError: access denied",
    )
    assert replicas(db, cid)["pfs"].error == "PermanentBackendError: access denied"
    # a restart gives permanent failures another chance (the config may have been fixed)
    assert jobs.requeue_failed_jobs(db, "permanent") == [job.id]
    assert jobs.requeue_failed_jobs(db, "permanent") == []


async def test_a_worker_that_lost_its_lease_stops_and_writes_nothing(
    setup: tuple[Config, Database, Flaky, int],
) -> None:
    config, db, dst, cid = setup
    dst.gate = asyncio.Event()  # the copy hangs, as if the worker stalled
    schedule_pass(db, ["nvme", "pfs"])
    claim = jobs.claim_next_copy_job(db, "n1:1", ["pfs"], lease_seconds=30)
    assert claim is not None
    runner = HopRunner(
        db=db,
        backends={"nvme": PosixBackend(config.tier0), "pfs": dst},
        tiers=config.tiers,
        limits=Limits.for_tiers(config.tiers),
        options=FAST,
        owner="n1:1",
        claim=claim,
    )
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(dst.writing.wait(), 5)  # it copies: its write hangs at the gate
    # the lease expired and another worker took the job
    later = utcnow() + timedelta(seconds=31)
    taken = jobs.claim_next_copy_job(db, "n2:9", ["pfs"], lease_seconds=30, now=later)
    assert taken is not None
    assert taken.job_id == claim.job_id
    assert await asyncio.wait_for(task, 5) == "lost"
    [job] = all_jobs(db)
    assert (job.state, job.lease_owner) == ("running", "n2:9")
    assert replicas(db, cid)["pfs"].state == "copying"  # left for the new owner
    assert audit(db) == []


async def test_small_files_count_as_done_only_once_committed(
    tmp_path: Path, sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(posixbatch, "MAX_FILES", 4)
    commits: list[tuple[list[str], set[str]]] = []
    real_commit = posixbatch.PosixBatch.commit

    async def watched(self: posixbatch.PosixBatch) -> list[str]:
        before = set(visible_files(tmp_path / "pfs"))
        committed = await real_commit(self)
        commits.append((committed, before))
        return committed

    monkeypatch.setattr(posixbatch.PosixBatch, "commit", watched)
    config = two_tiers(tmp_path, sqlite_db)
    sizes = {f"d{n % 2}/f{n}": 100 + n for n in range(10)}
    write_files(tmp_path / "nvme" / "r" / "s1", sizes)
    cid = record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    assert isinstance(config.tiers[1], PosixTier)
    backends: dict[str, Backend] = {"nvme": PosixBackend(config.tier0), "pfs": PosixBackend(config.tiers[1])}
    service = PipelineService(Context(config=config, db=sqlite_db), FAST, backends=backends)
    await run_pipeline_until(service, lambda: replicas(sqlite_db, cid)["pfs"].state == "verified", timeout=20)
    committed = [relpath for batch, _ in commits for relpath in batch]
    assert sorted(committed) == sorted(f"r/s1/{name}" for name in sizes)
    assert all(not set(batch) & before for batch, before in commits)  # unseen until their commit
    sizes_committed = [len(batch) for batch, _ in commits if batch]
    assert len(sizes_committed) >= 2  # full at four: committed before the data was all staged
    assert max(sizes_committed) <= 4 + 16 - 1  # plus what the other lanes staged meanwhile
    assert replicas(sqlite_db, cid)["pfs"].bytes_done == sum(sizes.values())
    assert sorted(visible_files(tmp_path / "pfs")) == sorted(f"r/s1/{name}" for name in sizes)


def visible_files(root: Path) -> list[str]:
    found = (os.path.join(d, n) for d, _, names in os.walk(root) for n in names if not is_temp_name(n))
    return [os.path.relpath(path, root) for path in found]


async def test_an_idle_pipeline_keeps_no_transfer_buffers(
    tmp_path: Path, sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cross_device(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")  # as between two file systems

    monkeypatch.setattr(os, "copy_file_range", cross_device)
    config = two_tiers(tmp_path, sqlite_db)
    write_files(tmp_path / "nvme" / "r" / "s1", {"big": 20 * 1024 * 1024 + 5, "marker": 10})
    cid = record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    service = PipelineService(Context(config=config, db=sqlite_db), FAST)
    taken: list[int] = []
    async with pipelines_running(service):
        budget = service._budget
        assert budget is not None
        real_take = budget._take_idle

        def counting(nbytes: int) -> Any:
            taken.append(nbytes)
            return real_take(nbytes)

        budget._take_idle = counting  # type: ignore[method-assign]
        await poll_until(
            lambda: replicas(sqlite_db, cid)["pfs"].state == "verified" and not service._running, timeout=20
        )
        assert taken  # the big file went through aligned chunk buffers ...
        assert budget.idle_bytes == 0  # ... which were unmapped once no hop was running


async def test_a_job_claimed_again_here_while_its_old_runner_hangs_never_runs_twice(
    setup: tuple[Config, Database, Flaky, int],
) -> None:
    """The old runner should have stopped by itself (``fence_seconds``); if it still hangs when
    its expired job is claimed again, it is cut as lost (not handed back to the queue) first."""
    config, db, dst, cid = setup
    dst.gate = asyncio.Event()  # the first write hangs
    slow_renewal = PipelineOptions(
        poll_interval=0.02, lease_seconds=30, renew_interval=100, progress_interval=0.02
    )
    backends: dict[str, Backend] = {"nvme": PosixBackend(config.tier0), "pfs": dst}
    service = PipelineService(Context(config=config, db=db), slow_renewal, backends=backends)
    with capture_logs() as logs:
        async with pipelines_running(service), asyncio.timeout(20):
            await poll_until(lambda: dst.writes > 0, timeout=20)
            expired = utcnow() - timedelta(seconds=1)
            with db.session() as session:  # its lease ran out (the catalog was away, say)
                session.get_one(Job, all_jobs(db)[0].id).lease_expires_at = expired
            service.ctx.wake_pipeline()
            await poll_until(lambda: any(e["event"] == "job_claimed_again" for e in logs), timeout=20)
            dst.gate.set()
            await poll_until(lambda: replicas(db, cid)["pfs"].state == "verified", timeout=20)
    events = [e["event"] for e in logs]
    assert events.count("hop_started") == 2
    assert "hop_released" not in events  # the old runner did not hand the job back
    [job] = all_jobs(db)
    assert (job.state, job.attempts) == ("done", 0)
    assert [e.action for e in audit(db)] == ["replica_verified"]


class _EndsOnASave(WriteBatch):
    """A batch whose last step (``discard``, after the marker) waits for a heartbeat's save."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self.ending: asyncio.Event | None = None

    async def discard(self) -> None:
        self.ending = asyncio.Event()
        await self.ending.wait()


@pytest.mark.parametrize("lag", range(12))
async def test_a_hop_ending_while_its_heartbeat_saves_logs_no_lease_lost(
    tmp_path: Path, sqlite_db: Database, monkeypatch: pytest.MonkeyPatch, lag: int
) -> None:
    """The copy ends as a progress save returns, ``lag`` loop turns before the save's task does.

    On Python 3.11 ``asyncio.wait_for`` hands back a result that lands with a cancel and
    drops the cancel, so a heartbeat only cancelled ran on past the hop's end and reported
    the finished job's lease lost at its next save. Some lag hits that window, whatever
    the number of turns the runner takes between the copy's end and stopping its heartbeat.
    """
    config = two_tiers(tmp_path, sqlite_db)
    write_files(tmp_path / "nvme" / "r" / "s1", {"a": 1000, "b": 2000})
    record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    pfs = config.tiers[1]
    assert isinstance(pfs, PosixTier)
    dst = PosixBackend(pfs)
    batch = _EndsOnASave(dst)
    monkeypatch.setattr(dst, "batch", lambda: batch)

    async def blocking_then_end(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        result = await blocking(fn, *args, **kwargs)
        ending = batch.ending
        if fn is records.save_progress and ending is not None and not ending.is_set():
            ending.set()  # the copy's last step returns...
            for _ in range(lag):  # ...lag turns of the loop before this save does
                await asyncio.sleep(0)
        return result

    monkeypatch.setattr(runner_module, "blocking", blocking_then_end)
    schedule_pass(sqlite_db, ["nvme", "pfs"])
    claim = jobs.claim_next_copy_job(sqlite_db, "n1:1", ["pfs"], lease_seconds=30)
    assert claim is not None
    runner = HopRunner(
        db=sqlite_db,
        backends={"nvme": PosixBackend(config.tier0), "pfs": dst},
        tiers=config.tiers,
        limits=Limits.for_tiers(config.tiers),
        options=FAST,
        owner="n1:1",
        claim=claim,
    )
    with capture_logs() as logs:
        assert await asyncio.create_task(runner.run()) == "verified"  # a task of its own, as in the service
        name = f"pipeline:heartbeat:{claim.job_id}"
        alive = [task for task in asyncio.all_tasks() if task.get_name() == name]
        if alive:  # it ran on, and found the finished job's lease gone at its next save
            await asyncio.wait(alive, timeout=5)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == []
    assert alive == []
