"""Hops into and out of S3 through the fault proxy, with the real pipeline in-process.

``upload_world`` makes a checkpoint on a POSIX tier 0 and an S3 tier reached through a
``FaultProxy`` (a ``tests.fixtures.world`` config and catalog); ``add_download_tier`` copies it
there first (no faults) and adds a POSIX tier after S3, so its hop reads from S3.
``download_world`` is that world with the upload done once per server and process: a copy of
its tier 0 and catalog, the same bucket (a download only reads it), a fresh proxy. ``Hops.hop``
runs the pipeline until the hop's replica is verified or failed. Jobs back off for a minute
(``OPTIONS``), so one pass is one hop: what a test counts is what one pass sent.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.faultproxy import FaultProxy, Rule
from tests.fixtures.pipeline_run import run_pipeline_until
from tests.fixtures.s3servers import S3Server
from tests.fixtures.world import World, posix_tier
from tests.integration.daemon_helpers import all_jobs, record_checkpoint, replicas, write_files
from tierd.config import Config, S3Tier
from tierd.daemon.backends.s3 import backend as s3_backend
from tierd.daemon.backends.s3.backend import REQUEST_ATTEMPTS
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.catalog.models import Job, Replica
from tierd.daemon.context import Context
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.service import PipelineService
from tierd.daemon.transfer.retry import FILE_ATTEMPTS, Backoff

__all__ = [
    "BOTOCORE_BOUND",
    "LEAN_BOUND",
    "OPTIONS",
    "Hops",
    "add_download_tier",
    "attempts_over_table",
    "download_world",
    "migrated_catalog",
    "stall_timeouts",
    "upload_world",
]

OPTIONS = PipelineOptions(
    poll_interval=0.05,
    lease_seconds=10,
    renew_interval=1,
    progress_interval=0.05,
    file_backoff=Backoff(base=0.01, cap=0.05),
    job_backoff=Backoff(base=60.0, cap=60.0),
)
RUN, STEP, PATH = "demo", 1, "demo/step1"


@dataclass
class Hops:
    """A checkpoint, its catalog, the tiers and the proxy in front of the S3 tier."""

    root: Path
    db: Database
    config: Config
    checkpoint_id: int
    data: dict[str, bytes]
    proxy: FaultProxy
    server: S3Server
    s3: S3Tier

    async def hop(self, tier: str, timeout: float = 90) -> Replica:
        """Run the pipeline until ``tier``'s replica is verified or failed; that replica.

        The pipeline knows the tiers up to ``tier`` only: the next hop never runs early, before
        a test has set the faults it is to meet.
        """
        upto = [t.name for t in self.config.tiers].index(tier) + 1
        ctx = Context(config=self.config.model_copy(update={"tiers": self.config.tiers[:upto]}), db=self.db)

        def ended() -> bool:
            return self.state(tier) in ("verified", "failed")

        await run_pipeline_until(PipelineService(ctx, OPTIONS), ended, timeout=timeout, in_thread=True)
        replica = replicas(self.db, self.checkpoint_id)[tier]
        self._log(tier, replica)
        return replica

    def _log(self, tier: str, replica: Replica) -> None:
        """With ``TIERD_FAULT_LOG`` set, add a JSON line: the faults fired and how the hop ended."""
        path = os.environ.get("TIERD_FAULT_LOG")
        if path and self.proxy.fired:
            line = {
                "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
                "store": self.server.kind,
                "tier": tier,
                "fired": self.proxy.fired,
                "state": replica.state,
                "error": replica.error,
                "requests": dict(self.proxy.counts),
            }
            with open(path, "a") as out:
                out.write(json.dumps(line) + "\n")

    def state(self, tier: str) -> str | None:
        """The replica's state on ``tier``."""
        row = replicas(self.db, self.checkpoint_id).get(tier)
        return row.state if row is not None else None

    def job(self, tier: str) -> Job:
        """The copy job into ``tier``."""
        return next(j for j in all_jobs(self.db) if j.dst_tier == tier)

    def stored(self) -> dict[str, bytes]:
        """What the bucket holds, read straight from the server (not through the proxy)."""
        client = self.server.client()
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=self.s3.bucket).get("Contents", [])]
        return {
            k.removeprefix(PATH + "/"): client.get_object(Bucket=self.s3.bucket, Key=k)["Body"].read()
            for k in keys
        }

    def pending_uploads(self) -> list[Any]:
        """Multipart uploads the bucket still has open."""
        return list(self.server.client().list_multipart_uploads(Bucket=self.s3.bucket).get("Uploads", []))

    def copied(self, tier: str) -> dict[str, bytes]:
        """The files of the checkpoint on the POSIX tier ``tier``."""
        root = self.root / tier / PATH
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def stall_timeouts(monkeypatch: pytest.MonkeyPatch, rule: Rule) -> None:
    """Where ``rule`` stalls answers, give them up after 4 s (a pipelined group after 2 s).

    Only there: elsewhere the production timeouts (120 s and 10 s) stay, so an answer slowed
    by a loaded machine is not taken for a fault. The backend reads them as its client opens.
    """
    if rule.fault.kind == "stall":
        monkeypatch.setattr(s3_backend, "READ_TIMEOUT", 4)
        monkeypatch.setattr(s3_backend, "PIPELINE_STALL", 2)


def _config(root: Path, db: Database, tiers: list[Any]) -> Config:
    return World.make(root, db, tiers, node="n1").config


@functools.cache
def migrated_catalog() -> Path:
    """A SQLite catalog migrated once per process (a migration is ~0.2 s of CPU); worlds copy it."""
    root = Path(tempfile.mkdtemp(prefix="tierd-hops-catalog-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    db = Database(f"sqlite:///{root / 'catalog.db'}")
    upgrade(db)
    db.dispose()  # its last connection closed: the WAL is folded into the file
    return root / "catalog.db"


@contextmanager
def upload_world(
    root: Path, server: S3Server, sizes: Mapping[str, int], **s3_settings: Any
) -> Iterator[Hops]:
    """tier 0 (POSIX, holding the checkpoint) and S3 through a fresh proxy."""
    (root / "nvme").mkdir()
    shutil.copyfile(migrated_catalog(), root / "catalog.db")
    db = Database(f"sqlite:///{root / 'catalog.db'}")
    with FaultProxy(server.endpoint_url) as proxy:
        s3 = server.new_tier("s3", endpoint_url=proxy.endpoint_url, **s3_settings)
        config = _config(root, db, [posix_tier(root, "nvme"), s3])
        data = write_files(root / "nvme" / PATH, sizes)
        cid = record_checkpoint(db, config, RUN, STEP, PATH)
        try:
            yield Hops(root, db, config, cid, data, proxy, server, s3)
        finally:
            db.dispose()


async def add_download_tier(world: Hops, **posix_settings: Any) -> None:
    """Copy the checkpoint to S3 (no faults), then add a POSIX tier ``pfs`` after it.

    The next ``hop("pfs")`` reads from S3. The proxy's counts start from zero.
    """
    assert (await world.hop("s3")).state == "verified"
    pfs = posix_tier(world.root, "pfs", **posix_settings)
    world.config = _config(world.root, world.db, [*world.config.tiers, pfs])
    world.proxy.reset_counts()


@dataclass(frozen=True)
class _Uploaded:
    """A world after its upload, kept to be copied: tier 0 and catalog under ``root``."""

    root: Path
    bucket: str
    checkpoint_id: int
    data: dict[str, bytes]


_uploaded: dict[tuple[str, tuple[tuple[str, int], ...]], _Uploaded] = {}


async def _upload_once(server: S3Server, sizes: Mapping[str, int]) -> _Uploaded:
    """The checkpoint uploaded to a bucket of ``server``, once per server, sizes and process."""
    key = (server.endpoint_url, tuple(sorted(sizes.items())))
    if key not in _uploaded:
        root = Path(tempfile.mkdtemp(prefix="tierd-uploaded-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        with upload_world(root, server, sizes) as world:
            assert (await world.hop("s3")).state == "verified"
            done = _Uploaded(root, world.s3.bucket, world.checkpoint_id, world.data)
        _uploaded[key] = done  # the catalog is closed: a plain file to copy
    return _uploaded[key]


@asynccontextmanager
async def download_world(
    root: Path, server: S3Server, sizes: Mapping[str, int], **posix_settings: Any
) -> AsyncIterator[Hops]:
    """What ``upload_world`` then ``add_download_tier`` make, the upload done once: tier 0 and
    the catalog copied from it, its bucket (read only here) behind a fresh proxy, then ``pfs``."""
    uploaded = await _upload_once(server, sizes)
    shutil.copytree(uploaded.root / "nvme", root / "nvme")  # mtimes kept: the catalog records them
    shutil.copyfile(uploaded.root / "catalog.db", root / "catalog.db")
    db = Database(f"sqlite:///{root / 'catalog.db'}")
    with FaultProxy(server.endpoint_url) as proxy:
        s3 = server.new_tier("s3", endpoint_url=proxy.endpoint_url, bucket=uploaded.bucket)
        tiers = [posix_tier(root, "nvme"), s3, posix_tier(root, "pfs", **posix_settings)]
        world = Hops(
            root, db, _config(root, db, tiers), uploaded.checkpoint_id, uploaded.data, proxy, server, s3
        )
        try:
            yield world
        finally:
            db.dispose()


#: Sends of one request per file in one pass, by the retries table (docs/retries.md).
LEAN_BOUND = FILE_ATTEMPTS * (1 + REQUEST_ATTEMPTS)  # a small object's PutObject, HeadObject, GET
BOTOCORE_BOUND = FILE_ATTEMPTS * REQUEST_ATTEMPTS  # parts, multipart calls, ranged GETs
LEAN_OPERATIONS = frozenset({"PutObject", "HeadObject", "GetObject"})
#: aiohttp sends an idempotent request (PUT, GET, HEAD, DELETE) once more when its
#: connection drops, under botocore's and tierd's retries: the table doubles for those.
IDEMPOTENT = frozenset({"PutObject", "UploadPart", "HeadObject", "GetObject", "DeleteObject"})


def attempts_over_table(proxy: FaultProxy, *, dropped: bool = False) -> dict[tuple[str, str, str], int]:
    """The requests sent more often in this pass than docs/retries.md allows (none, if right).

    Keyed by (operation, key, part number); GETs of one key count together (ranges too,
    which makes this stricter than the table for big objects). ``dropped``: the faults
    dropped connections, which aiohttp's own resend doubles for idempotent requests.
    """
    sends = Counter((r.operation, r.key, "".join(r.query.get("partNumber", []))) for r in proxy.requests)

    def bound(operation: str) -> int:
        table = LEAN_BOUND if operation in LEAN_OPERATIONS else BOTOCORE_BOUND
        return table * 2 if dropped and operation in IDEMPOTENT else table

    return {what: count for what, count in sends.items() if count > bound(what[0])}
