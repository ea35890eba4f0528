"""The pipeline in-process over real tiers: POSIX, POSIX, S3 on moto, S3 on ``rclone serve s3``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from structlog.testing import capture_logs

from tests.fixtures.pipeline_run import run_pipeline_until
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import (
    MiB,
    all_jobs,
    audit,
    record_checkpoint,
    replicas,
    states,
    uploads,
    write_files,
)
from tierd.api.app import create_app
from tierd.config import Config
from tierd.daemon.backends import make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import claim_next_copy_job
from tierd.daemon.catalog.models import Checkpoint, Replica
from tierd.daemon.context import Context
from tierd.daemon.detect.changes import CHANGED_ON_TIER0
from tierd.daemon.detect.service import DetectService
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.runner import HopRunner, Limits
from tierd.daemon.pipeline.scheduler import schedule_pass
from tierd.daemon.pipeline.service import PipelineService
from tierd.daemon.transfer.retry import Backoff

FAST = PipelineOptions(
    poll_interval=0.05,
    lease_seconds=10,
    renew_interval=1,
    progress_interval=0.05,
    file_backoff=Backoff(base=0.01, cap=0.05),
    job_backoff=Backoff(base=0.05, cap=0.2),
)
SIZES = {
    "shard0.distcp": 12 * MiB + 123,  # multipart: three 5 MiB parts
    "shard1.distcp": 1 * MiB + 7,  # one PutObject
    "nested/dir/empty.bin": 0,
    ".metadata": 3000,  # written last: the completion marker
}


def _config(tmp_path: Path, *s3_tiers: Any, **overrides: Any) -> Config:
    tiers: list[Any] = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs"), "concurrency": 2},
        *s3_tiers,
    ]
    (tmp_path / "nvme").mkdir()
    (tmp_path / "pfs").mkdir()
    return Config(
        node="n1", catalog={"url": f"sqlite:///{tmp_path / 'catalog.db'}"}, tiers=tiers, **overrides
    )


@pytest.fixture
def database(sqlite_db: Database) -> Database:
    """The catalog the config names (``tmp_path / "catalog.db"``): a copy of the session's migrated one."""
    return sqlite_db


async def _run_until(config: Config, db: Database, done: Callable[[], bool], timeout: float = 60) -> Context:
    ctx = Context(config=config, db=db)
    await run_pipeline_until(PipelineService(ctx, FAST), done, timeout=timeout, in_thread=True)
    return ctx


def _objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    client = server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


async def test_four_tier_chain_copies_every_byte(
    tmp_path: Path, database: Database, moto_server: S3Server, rclone_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3")
    dr = rclone_server.new_tier("dr")
    config = _config(tmp_path, s3, dr)
    data = write_files(tmp_path / "nvme" / "demo" / "step100", SIZES)
    cid = record_checkpoint(database, config, "demo", 100, "demo/step100")

    with capture_logs() as logs:
        await _run_until(config, database, lambda: states(database, cid)["dr"] == "verified")

    expected = {f"demo/step100/{name}": content for name, content in data.items()}
    pfs = tmp_path / "pfs"
    assert {str(p.relative_to(pfs)): p.read_bytes() for p in pfs.rglob("*") if p.is_file()} == expected
    assert _objects(moto_server, s3.bucket) == expected
    assert _objects(rclone_server, dr.bucket) == expected
    for server, bucket in ((moto_server, s3.bucket), (rclone_server, dr.bucket)):
        assert server.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    rows = replicas(database, cid)
    total = sum(SIZES.values())
    for tier in ("pfs", "s3", "dr"):
        assert (rows[tier].state, rows[tier].bytes_done, rows[tier].error) == ("verified", total, None)
        assert rows[tier].verified_at is not None
    assert rows["s3"].location == f"s3://{s3.bucket}/demo/step100"
    assert rows["pfs"].location == str(pfs / "demo" / "step100")
    assert [(j.src_tier, j.dst_tier, j.state) for j in all_jobs(database)] == [
        ("nvme", "pfs", "done"),
        ("pfs", "s3", "done"),
        ("s3", "dr", "done"),
    ]
    assert [(e.actor, e.action, e.tier) for e in audit(database)] == [
        ("pipeline", "replica_verified", "pfs"),
        ("pipeline", "replica_verified", "s3"),
        ("pipeline", "replica_verified", "dr"),
    ]
    assert uploads(database) == []
    # the completion marker went last on every hop
    copied = [e for e in logs if e["event"] == "file_copied"]
    for tier in ("pfs", "s3", "dr"):
        assert [e["relpath"] for e in copied if e["tier"] == tier][-1].endswith(".metadata")


async def test_same_endpoint_copies_server_side(
    tmp_path: Path, database: Database, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3")
    second = moto_server.new_tier("region2")
    config = _config(tmp_path, s3, second)
    data = write_files(tmp_path / "nvme" / "r" / "s1", {"a.bin": 6 * MiB, "b.bin": 10})
    cid = record_checkpoint(database, config, "r", 1, "r/s1")

    with capture_logs() as logs:
        await _run_until(config, database, lambda: states(database, cid)["region2"] == "verified")

    assert _objects(moto_server, second.bucket) == {f"r/s1/{k}": v for k, v in data.items()}
    methods = {(e["tier"], e["method"]) for e in logs if e["event"] == "file_copied"}
    assert methods == {("pfs", "streamed"), ("s3", "streamed"), ("region2", "server-side")}


async def test_newest_checkpoint_moves_first(tmp_path: Path, database: Database) -> None:
    config = _config(tmp_path)
    ids = []
    for step in (1, 2, 3):
        write_files(tmp_path / "nvme" / "r" / f"s{step}", {"x": 1000})
        ids.append(record_checkpoint(database, config, "r", step, f"r/s{step}"))
    one_at_a_time = config.model_copy(
        update={"tiers": [config.tiers[0], config.tiers[1].model_copy(update={"concurrency": 1})]}
    )
    with capture_logs() as logs:
        await _run_until(
            one_at_a_time, database, lambda: all(states(database, c)["pfs"] == "verified" for c in ids)
        )
    order = [e["checkpoint"] for e in logs if e["event"] == "hop_started"]
    assert order == ids[::-1]


async def test_corrupted_source_is_never_verified(tmp_path: Path, database: Database) -> None:
    config = _config(tmp_path)
    write_files(tmp_path / "nvme" / "r" / "s1", {"model.pt": 3 * MiB, ".metadata": 100})
    cid = record_checkpoint(database, config, "r", 1, "r/s1")
    victim = tmp_path / "nvme" / "r" / "s1" / "model.pt"
    with victim.open("r+b") as f:  # one flipped byte after detection recorded the checksum
        f.seek(1_000_000)
        byte = f.read(1)
        f.seek(1_000_000)
        f.write(bytes([byte[0] ^ 0x01]))

    ctx = await _run_until(config, database, lambda: states(database, cid)["pfs"] == "failed")

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(ctx)), base_url="http://t"
    ) as api:
        [item] = (await api.get("/v1/checkpoints")).json()["items"]
    shown = {r["tier"]: (r["state"], r["verified_at"], r["error"]) for r in item["replicas"]}
    assert shown["pfs"][:2] == ("failed", None)
    assert "IntegrityError" in shown["pfs"][2]
    row = replicas(database, cid)["pfs"]
    assert row.verified_at is None
    assert row.error is not None
    assert "IntegrityError" in row.error
    assert "model.pt" in row.error
    [job] = all_jobs(database)
    assert (job.state, job.detail["reason"]) == ("failed", "integrity")
    assert [(e.action, e.tier) for e in audit(database)] == [("replica_failed", "pfs")]
    # nothing under a final name, no temporary left, and the marker never went ahead of its data
    assert [p for p in (tmp_path / "pfs").rglob("*") if p.is_file()] == []
    assert states(database, cid) == {"nvme": "verified", "pfs": "failed"}


async def test_a_gone_copy_falls_back_to_the_nearest_earlier_verified_tier(
    tmp_path: Path, database: Database
) -> None:
    (tmp_path / "obj").mkdir()
    config = _config(tmp_path, {"name": "obj", "kind": "posix", "path": str(tmp_path / "obj")})
    data = write_files(tmp_path / "nvme" / "r" / "s1", {"x.bin": 5000})
    cid = record_checkpoint(database, config, "r", 1, "r/s1")
    with database.session() as s:  # retention already removed the pfs copy
        s.execute(update(Replica).where(Replica.tier == "pfs").values(state="deleted"))

    await _run_until(config, database, lambda: states(database, cid)["obj"] == "verified")

    assert (tmp_path / "obj" / "r" / "s1" / "x.bin").read_bytes() == data["x.bin"]
    assert [(j.src_tier, j.dst_tier, j.state) for j in all_jobs(database)] == [("nvme", "obj", "done")]
    assert states(database, cid)["pfs"] == "deleted"


async def test_a_key_s3_would_refuse_fails_the_hop_before_any_upload(
    tmp_path: Path, database: Database, moto_server: S3Server
) -> None:
    """1,025 bytes of key (moto would take it; AWS does not): the hop fails at once, naming why."""
    s3 = moto_server.new_tier("s3", prefix="cluster")
    config = _config(tmp_path, s3)
    deep = "/".join(["d" * 200] * 4) + "/" + "f" * 208  # with "cluster/" and "r/s1/": 1,025 bytes
    write_files(tmp_path / "nvme" / "r" / "s1", {deep: 10, ".metadata": 10})
    cid = record_checkpoint(database, config, "r", 1, "r/s1")
    await _run_until(config, database, lambda: states(database, cid)["s3"] == "failed")
    error = replicas(database, cid)["s3"].error
    assert error is not None
    assert "PermanentBackendError" in error
    assert "the object key is 1,025 bytes in UTF-8; S3 takes at most 1,024" in error
    [job] = [j for j in all_jobs(database) if j.dst_tier == "s3"]
    assert (job.state, job.detail["reason"]) == ("failed", "permanent")
    assert _objects(moto_server, s3.bucket) == {}  # not even the other file: the marker waits for it


async def test_a_changed_checkpoint_moves_on_from_its_verified_first_sight_copy(
    tmp_path: Path, database: Database
) -> None:
    """The job rewrites a recorded step on tier 0 after the hop to pfs: pfs holds the bytes seen
    first, so the step goes on to ``object`` from pfs; tier 0's replica is failed, never a source."""
    watch = [{"path": str(tmp_path / "nvme" / "demo"), "run": "demo"}]
    (tmp_path / "object").mkdir()
    config = _config(
        tmp_path, {"name": "object", "kind": "posix", "path": str(tmp_path / "object")}, watch=watch
    )
    first = write_files(tmp_path / "nvme" / "demo" / "step_1", {"shard.distcp": 64 * 1024, ".metadata": 100})
    ctx = Context(config=config, db=database)
    detect = DetectService(ctx)
    await detect.reconcile()
    [cid] = [c.id for c in _checkpoints(database)]
    names = [t.name for t in config.tiers]
    assert schedule_pass(database, names) == 1  # nvme -> pfs; object waits for pfs
    claim = claim_next_copy_job(database, "n1:1", ["pfs"], lease_seconds=30)
    assert claim is not None
    runner = HopRunner(
        db=database,
        backends={t.name: make_backend(t) for t in config.tiers},
        tiers=config.tiers,
        limits=Limits.for_tiers(config.tiers),
        options=FAST,
        owner="n1:1",
        claim=claim,
    )
    assert await runner.run() == "verified"

    shard = tmp_path / "nvme" / "demo" / "step_1" / "shard.distcp"
    shard.write_bytes(os.urandom(64 * 1024))  # rewritten in place after first sight
    await detect.reconcile()
    [row] = _checkpoints(database)
    assert row.state == "changed"
    nvme = replicas(database, cid)["nvme"]
    assert (nvme.state, nvme.error) == ("failed", CHANGED_ON_TIER0)

    await _run_until(config, database, lambda: states(database, cid)["object"] == "verified", timeout=30)
    copied = {p.name: p.read_bytes() for p in (tmp_path / "object" / "demo" / "step_1").iterdir()}
    assert copied == first  # the bytes seen first, not the rewritten ones
    hops = [(j.src_tier, j.dst_tier, j.state) for j in all_jobs(database)]
    assert hops == [("nvme", "pfs", "done"), ("pfs", "object", "done")]
    assert states(database, cid) == {"nvme": "failed", "pfs": "verified", "object": "verified"}
    assert [e.action for e in audit(database)] == [
        "detected",
        "replica_verified",
        "changed",
        "replica_verified",
    ]


def _checkpoints(db: Database) -> list[Checkpoint]:
    with db.read_session() as session:
        return list(session.scalars(select(Checkpoint).order_by(Checkpoint.id)))
