"""A hop clears what killed attempts of its own files left, before it copies, and nothing else.

Real tiers (POSIX directories, S3 on moto's server) and the real pipeline service.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from tests.fixtures.pipeline_run import FAST, run_pipeline_until
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import MiB, record_checkpoint, replicas, tier_dict, write_files
from tierd.config import Config
from tierd.daemon.backends import Backend, close_backends, make_backend
from tierd.daemon.backends.posix.backend import TEMP_MARK, is_temp_name
from tierd.daemon.backends.uploads import UploadState
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.pipeline.resume import CatalogResumeStore
from tierd.daemon.pipeline.service import PipelineService

# The periodic sweep must not get there first (moto says every upload began in 2010).
NO_SWEEP = dataclasses.replace(FAST, stale_upload_seconds=20 * 365 * 86400.0)


def config_for(tmp_path: Path, db: Database, dst: dict[str, Any]) -> Config:
    (tmp_path / "nvme").mkdir()
    tier0 = {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")}
    return Config(node="n1", catalog={"url": db.url}, tiers=[tier0, dst])


Events = list[MutableMapping[str, Any]]


async def run_until(
    config: Config, db: Database, until: Callable[[], bool], backends: dict[str, Backend] | None = None
) -> Events:
    """Run the pipeline until ``until()``; returns the log events."""
    backends = backends or {t.name: make_backend(t) for t in config.tiers}
    service = PipelineService(Context(config=config, db=db), NO_SWEEP, backends=backends)
    with capture_logs() as logs:
        try:
            await run_pipeline_until(service, until)
        finally:
            await close_backends(backends)
    return logs


async def test_posix_hop_removes_its_files_temp_files_only(tmp_path: Path, sqlite_db: Database) -> None:
    (tmp_path / "pfs").mkdir()
    config = config_for(tmp_path, sqlite_db, {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")})
    write_files(tmp_path / "nvme" / "r" / "s1", {"a": 1000, "b": 3 * MiB})
    cid = record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    step = tmp_path / "pfs" / "r" / "s1"
    step.mkdir(parents=True)
    ours = [step / f".{name}{TEMP_MARK}0123456789ab" for name in ("a", "b")]
    theirs = step / f".c{TEMP_MARK}0123456789ab"  # another daemon's file of the same step
    for path in [*ours, theirs]:
        path.write_bytes(b"partial")  # just now: younger than any age threshold
    logs = await run_until(config, sqlite_db, lambda: replicas(sqlite_db, cid)["pfs"].state == "verified")
    assert sorted(p.name for p in step.iterdir() if is_temp_name(p.name)) == [theirs.name]
    [removed] = [e for e in logs if e["event"] == "leftovers_removed"]
    assert removed["count"] == 2


async def test_s3_hop_aborts_unrecorded_uploads_and_resumes_the_recorded_one(
    tmp_path: Path, sqlite_db: Database, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3")
    config = config_for(tmp_path, sqlite_db, tier_dict(s3))
    write_files(tmp_path / "nvme" / "r" / "s1", {"a": 1000, "big": 12 * MiB})
    cid = record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    client = moto_server.client()

    def open_upload(key: str) -> str:
        upload_id: str = client.create_multipart_upload(Bucket=s3.bucket, Key=key)["UploadId"]
        return upload_id

    recorded = open_upload("r/s1/big")  # a killed attempt that recorded its upload: to resume
    state = UploadState(recorded, "r/s1/big", 5 * MiB, 12 * MiB)
    await CatalogResumeStore(sqlite_db, cid, "s3").begin("r/s1/big", state)
    open_upload("r/s1/big")  # killed between creating an upload and recording it
    open_upload("r/s1/a")  # a small file now, but an attempt left it an upload
    theirs = open_upload("r/s1/c")  # another daemon's file of the same step
    logs = await run_until(config, sqlite_db, lambda: replicas(sqlite_db, cid)["s3"].state == "verified")
    still_open = client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in still_open] == [("r/s1/c", theirs)]
    [removed] = [e for e in logs if e["event"] == "leftovers_removed"]
    assert (removed["count"], removed["kept_uploads"]) == (2, 1)
    assert [e["upload_id"] for e in logs if e["event"] == "upload_resume_loaded"] == [recorded]


async def test_s3_hop_aborts_an_upload_opened_after_its_start_once_every_file_is_in(
    tmp_path: Path, sqlite_db: Database, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3")
    config = config_for(tmp_path, sqlite_db, tier_dict(s3))
    write_files(tmp_path / "nvme" / "r" / "s1", {"a": 1000, "big": 12 * MiB})
    cid = record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    client = moto_server.client()
    backends: dict[str, Backend] = {t.name: make_backend(t) for t in config.tiers}
    store = backends["s3"]
    looked = store.remove_leftovers
    late: list[str] = []

    async def then_a_late_upload(relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        removed = await looked(relpaths, keep=keep)
        if not late:  # the start's clean-up has looked: a killed run's request lands only now
            late.append(client.create_multipart_upload(Bucket=s3.bucket, Key="r/s1/big")["UploadId"])
        return removed

    store.remove_leftovers = then_a_late_upload  # type: ignore[method-assign]
    logs = await run_until(
        config, sqlite_db, lambda: replicas(sqlite_db, cid)["s3"].state == "verified", backends
    )
    assert late, "the hop did not clean up before it copied"
    assert client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []
    [after] = [e for e in logs if e["event"] == "leftovers_removed" and e["when"] == "after"]
    assert after["count"] == 1
