"""SIGTERM while two checkpoints are in flight: the newest finishes, the older one is left resumable."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import (
    MiB,
    all_jobs,
    config_dict,
    record_checkpoint,
    replicas,
    tier_dict,
    uploads,
    wait_for,
    write_files,
)
from tierd.config import load_config
from tierd.daemon.catalog.db import Database

CAP = 8 * MiB
DRAIN = 10.0


def _objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    client = server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


@pytest.mark.slow
def test_sigterm_finishes_the_newest_and_leaves_older_resumable(
    tmp_path: Path, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3", bandwidth_limit=CAP)
    (tmp_path / "nvme").mkdir()
    tiers = [{"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")}, tier_dict(s3)]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers, drain_timeout_seconds=DRAIN))
    config = load_config(daemon.config_path)
    db = Database(config.catalog.url)
    # 128 MiB at 8 MiB/s: still copying when the daemon's next poll (10 s) finds the new step.
    old_data = write_files(tmp_path / "nvme" / "r" / "s1", {"a.bin": 128 * MiB, ".metadata": 100}, seed=1)
    old = record_checkpoint(db, config, "r", 1, "r/s1")
    client = moto_server.client()

    try:
        daemon.start()
        wait_for(
            lambda: any(p for t, _, _, p in uploads(db) if t == "s3"), 60, "the old checkpoint's first part"
        )
        new_data = write_files(tmp_path / "nvme" / "r" / "s2", {"b.bin": 10 * MiB, ".metadata": 100}, seed=2)
        new = record_checkpoint(db, config, "r", 2, "r/s2")  # the daemon finds it on its next poll
        wait_for(lambda: replicas(db, new)["s3"].state == "copying", 30, "the new checkpoint's hop to start")
        assert replicas(db, old)["s3"].state == "copying"
        started = time.monotonic()
        assert daemon.terminate(DRAIN + 20) == 0
        elapsed = time.monotonic() - started
    finally:
        daemon.stop()
    assert elapsed < DRAIN, f"took {elapsed:.1f}s to stop"

    # the newest checkpoint's transfer finished within the bound
    assert replicas(db, new)["s3"].state == "verified"
    objects = _objects(moto_server, s3.bucket)
    assert {k: v for k, v in objects.items() if k.startswith("r/s2/")} == {
        f"r/s2/{k}": v for k, v in new_data.items()
    }
    assert not any(k.startswith("r/s1/") for k in objects)  # nothing of the cut one under a final name

    # the older one was cut at once and left resumable
    row = replicas(db, old)["s3"]
    assert (row.state, row.error) == ("pending", None)
    assert row.bytes_done > 0
    job = next(j for j in all_jobs(db) if j.checkpoint_id == old)
    assert (job.state, job.lease_owner, job.attempts) == ("queued", None, 0)
    recorded = {upload_id: parts for t, _, upload_id, parts in uploads(db) if t == "s3"}
    assert recorded
    assert any(recorded.values())
    open_ids = {u["UploadId"] for u in client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", [])}
    assert set(recorded) <= open_ids  # still open on the server, to be resumed
    [drained] = [e for e in daemon.events(1) if e["event"] == "pipeline_drained"]
    assert drained["finished"] == [f"checkpoint {new} -> s3: verified"]
    assert drained["cut"] == [f"checkpoint {old} -> s3"]

    # a restart resumes the cut upload where it stopped and completes it
    try:
        daemon.start()
        wait_for(lambda: replicas(db, old)["s3"].state == "verified", 60, "the old checkpoint to be verified")
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()
    loaded = {e["upload_id"]: e["parts"] for e in daemon.events(2) if e["event"] == "upload_resume_loaded"}
    assert loaded == {k: len(v) for k, v in recorded.items()}
    assert [e for e in daemon.events() if e["event"] in ("upload_restarted", "upload_part_resent")] == []
    objects = _objects(moto_server, s3.bucket)
    assert {k: v for k, v in objects.items() if k.startswith("r/s1/")} == {
        f"r/s1/{k}": v for k, v in old_data.items()
    }
    assert client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []
    assert uploads(db) == []
