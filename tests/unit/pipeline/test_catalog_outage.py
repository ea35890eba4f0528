"""A PostgreSQL catalog stopped and started under a running pipeline (a server of the test's own).

A short outage: the copy goes on, progress waits, one hop, one verified replica. An outage
longer than the lease: the runner stops before its unrenewed lease can run out, the job is
claimed again only once it has expired, and the copy resumes. Never two writers at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.fixtures.pipeline_run import pipelines_running, poll_until
from tests.fixtures.postgres import PostgresServer
from tests.integration.daemon_helpers import MiB, all_jobs, audit, record_checkpoint, replicas, write_files
from tierd.config import Config
from tierd.daemon.backends.base import (
    Backend,
    ObjectInfo,
    WriteBatch,
    WriteRequest,
)
from tierd.daemon.backends.posix.backend import PosixBackend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.context import Context
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.service import PipelineService

OPTIONS = PipelineOptions(poll_interval=0.2, lease_seconds=4, renew_interval=0.5, progress_interval=0.1)
FILES = {f"shard{i}.bin": 512 * 1024 for i in range(8)} | {".metadata": 1000}
RATE = 1 * MiB  # bytes per second into pfs: the hop takes about 4 s


class Watched(PosixBackend):
    """A POSIX tier that counts the writes in flight (the most seen at once in ``most``) and
    the writes of each file (``writes``); ``before_first`` runs before the first write."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inflight = 0
        self.most = 0
        self.writes: Counter[str] = Counter()
        self.before_first: Callable[[], Awaitable[None]] | None = None

    def batch(self) -> WriteBatch:
        """No staging: every file goes through ``write``."""
        return WriteBatch(self)

    async def write(self, request: WriteRequest) -> ObjectInfo:
        if self.before_first is not None:
            before, self.before_first = self.before_first, None
            await before()
        self.writes[request.relpath] += 1
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        try:
            return await super().write(request)
        finally:
            self.inflight -= 1


@pytest.fixture
def catalog(private_postgres: PostgresServer) -> Iterator[Database]:
    db = Database(private_postgres.new_database())
    upgrade(db)
    yield db
    db.dispose()


def _config(tmp_path: Path, db: Database, rate: int = RATE) -> Config:
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
    pfs = {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs"), "concurrency": 1}
    return Config(
        node="n1",
        catalog={"url": db.url},
        tiers=[
            {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
            pfs | {"bandwidth_limit": rate},
        ],
    )


async def _outage_during_hop(
    tmp_path: Path, db: Database, server: PostgresServer, seconds: float
) -> tuple[Watched, list[MutableMapping[str, Any]], int]:
    """Start a hop, stop PostgreSQL for ``seconds`` once it copies, wait for the verified replica."""
    config = _config(tmp_path, db)
    data = write_files(tmp_path / "nvme" / "r" / "s1", FILES)
    cid = record_checkpoint(db, config, "r", 1, "r/s1")
    dst = Watched(config.tiers[1])
    backends: dict[str, Backend] = {"nvme": PosixBackend(config.tier0), "pfs": dst}
    service = PipelineService(Context(config=config, db=db), OPTIONS, backends=backends)
    with capture_logs() as logs:
        async with pipelines_running(service), asyncio.timeout(60):
            await poll_until(lambda: (replicas(db, cid)["pfs"].bytes_done or 0) >= 512 * 1024, timeout=60)
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(seconds)  # the outage's length
            await asyncio.to_thread(server.start)
            await poll_until(lambda: replicas(db, cid)["pfs"].state == "verified", timeout=60)
    copied = {p.name: p.read_bytes() for p in (tmp_path / "pfs" / "r" / "s1").iterdir()}
    assert copied == data
    return dst, logs, cid


async def test_a_short_outage_does_not_interrupt_the_hop(
    tmp_path: Path, catalog: Database, private_postgres: PostgresServer
) -> None:
    dst, logs, cid = await _outage_during_hop(tmp_path, catalog, private_postgres, 1.0)

    events = [e["event"] for e in logs]
    assert events.count("hop_started") == 1
    assert events.count("progress_not_saved") == 1  # one line for the outage, not one per save
    assert "progress_saved_again" in events
    assert "lease_not_renewed" not in events
    assert events.count("catalog_unavailable") <= 1  # the scheduling loop's one line, if it noticed
    [job] = all_jobs(catalog)
    assert (job.state, job.attempts) == ("done", 0)
    assert [e.action for e in audit(catalog) if e.checkpoint_id == cid] == ["replica_verified"]
    assert dst.most == 1


@pytest.mark.slow
async def test_an_outage_longer_than_the_lease_stops_the_hop_before_it_is_claimed_again(
    tmp_path: Path, catalog: Database, private_postgres: PostgresServer
) -> None:
    assert OPTIONS.fence_seconds < OPTIONS.lease_seconds
    dst, logs, cid = await _outage_during_hop(tmp_path, catalog, private_postgres, OPTIONS.lease_seconds + 2)

    events = [e["event"] for e in logs]
    stopped = events.index("lease_not_renewed")  # the runner stopped itself, unrenewed
    starts = [i for i, event in enumerate(events) if event == "hop_started"]
    assert len(starts) == 2
    assert starts[0] < stopped < starts[1]  # the second run began after the first had stopped
    assert "job_claimed_again" not in events  # it had ended by itself, not been cut by the claim
    assert dst.most == 1  # never two writers at once
    [job] = all_jobs(catalog)
    assert (job.state, job.attempts) == ("done", 0)
    assert [e.action for e in audit(catalog) if e.checkpoint_id == cid] == ["replica_verified"]


@pytest.mark.slow
async def test_a_hop_that_finished_while_the_catalog_was_away_is_not_copied_again(
    tmp_path: Path, catalog: Database, private_postgres: PostgresServer
) -> None:
    """PostgreSQL stops as the hop's first file is written and stays away until the runner gave
    up recording the end: every file was written, none recorded. The next run finds each
    on pfs, reads it back (POSIX reports no checksum), and records it: nothing written twice."""
    config = _config(tmp_path, catalog, rate=64 * MiB)
    data = write_files(
        tmp_path / "nvme" / "r" / "s1", {f"shard{i}.bin": 256 * 1024 for i in range(4)} | {".metadata": 100}
    )
    cid = record_checkpoint(catalog, config, "r", 1, "r/s1")
    dst = Watched(config.tiers[1])

    async def catalog_away() -> None:
        await asyncio.to_thread(private_postgres.stop)

    dst.before_first = catalog_away
    backends: dict[str, Backend] = {"nvme": PosixBackend(config.tier0), "pfs": dst}
    service = PipelineService(Context(config=config, db=catalog), OPTIONS, backends=backends)
    with capture_logs() as logs:
        async with pipelines_running(service), asyncio.timeout(60):
            await poll_until(lambda: any(e["event"] == "hop_end_not_recorded" for e in logs), timeout=60)
            await asyncio.to_thread(private_postgres.start)
            await poll_until(lambda: replicas(catalog, cid)["pfs"].state == "verified", timeout=60)

    events = [e["event"] for e in logs]
    assert events.count("hop_started") == 2
    [unrecorded] = [e for e in logs if e["event"] == "hop_end_not_recorded"]
    assert unrecorded["end"] == "verified"  # the first run had written every file
    assert dst.writes == Counter({f"r/s1/{name}": 1 for name in data})  # none sent twice
    copied = {p.name: p.read_bytes() for p in (tmp_path / "pfs" / "r" / "s1").iterdir()}
    assert copied == data
    [job] = all_jobs(catalog)
    assert (job.state, job.attempts) == ("done", 0)
    assert [e.action for e in audit(catalog) if e.checkpoint_id == cid] == ["replica_verified"]
    assert replicas(catalog, cid)["pfs"].bytes_done == sum(len(b) for b in data.values())
