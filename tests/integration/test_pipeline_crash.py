"""kill -9 of the daemon (a real ``python -m tierd run`` subprocess) in the middle of every hop.

After each restart the pipeline must pick up where it stopped: nothing partial is ever
visible under a final name, multipart uploads resume under their UploadId (parts sent
before the kill are not sent again), and at the end every byte matches and no upload or
temporary file is left (the resumed hop removed them). The kill -9 soak is in
``test_pipeline_soak``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import (
    MiB,
    all_jobs,
    audit,
    config_dict,
    done_files,
    record_checkpoint,
    replicas,
    states,
    tier_dict,
    uploads,
    wait_for,
    write_files,
)
from tierd.config import load_config
from tierd.daemon.backends.posix.backend import is_temp_name
from tierd.daemon.catalog.db import Database

CAP = 6 * MiB  # bytes/s into each tier: a hop of ~23 MiB takes ~4 s, so a kill lands mid-hop
SIZES = {"shard0.distcp": 12 * MiB + 5, "shard1.distcp": 11 * MiB, ".metadata": 4096}
PEAK_RSS_LIMIT = 200 * MiB


def _posix_files(root: Path) -> tuple[dict[str, bytes], list[str]]:
    """(final-name files with their bytes, temporary names) under ``root``."""
    finals: dict[str, bytes] = {}
    temps: list[str] = []
    for path in root.rglob("*"):
        if path.is_file():
            rel = str(path.relative_to(root))
            if is_temp_name(path.name):
                temps.append(rel)
            else:
                finals[rel] = path.read_bytes()
    return finals, temps


def _objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    client = server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def _open_uploads(server: S3Server, bucket: str) -> list[str]:
    return [u["UploadId"] for u in server.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.slow
def test_kill_9_during_every_hop_then_resume(
    tmp_path: Path, moto_server: S3Server, rclone_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3", bandwidth_limit=CAP)
    dr = rclone_server.new_tier("dr", bandwidth_limit=CAP)
    (tmp_path / "nvme").mkdir()
    (tmp_path / "pfs").mkdir()
    tiers: list[dict[str, Any]] = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs"), "bandwidth_limit": CAP},
        tier_dict(s3),
        tier_dict(dr),
    ]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers), exec=True)  # its own memory
    config = load_config(daemon.config_path)
    db = Database(config.catalog.url)
    data = write_files(tmp_path / "nvme" / "demo" / "step7", SIZES)
    expected = {f"demo/step7/{name}": content for name, content in data.items()}
    cid = record_checkpoint(db, config, "demo", 7, "demo/step7")

    def visible() -> dict[str, dict[str, bytes]]:
        """What each tier shows under final names (must only ever be complete files)."""
        return {
            "pfs": _posix_files(tmp_path / "pfs")[0],
            "s3": _objects(moto_server, s3.bucket),
            "dr": _objects(rclone_server, dr.bucket),
        }

    cut_uploads: dict[str, dict[str, int]] = {}
    try:
        for run, tier in enumerate(("pfs", "s3", "dr"), start=1):
            daemon.start()
            wait_for(partial(_mid_hop, db, cid, tier), 60, f"the {tier} hop to be under way (run {run})")
            shown = _api_replica(config.api.port, tier)
            # Again, just before the kill: while the API answered, the file whose part was
            # recorded may have finished and the next begun with none (seen under load).
            wait_for(partial(_mid_hop, db, cid, tier), 60, f"the {tier} hop under way at the kill")
            daemon.kill()
            assert shown["state"] == "copying"
            assert 0 < shown["bytes_done"] < sum(SIZES.values())
            assert states(db, cid)[tier] == "copying", f"the kill must land during the {tier} hop"
            cut_uploads[tier] = {u[2]: len(u[3]) for u in uploads(db) if u[0] == tier}
            for where, files in visible().items():
                assert all(expected.get(k) == v for k, v in files.items()), f"partial file visible on {where}"
        daemon.start()
        wait_for(lambda: states(db, cid)["dr"] == "verified", 90, "the whole chain to be verified")
        peak = _peak_rss(daemon.pid) if daemon.pid else 0
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()

    final = visible()
    assert final == {"pfs": expected, "s3": expected, "dr": expected}, daemon.tail()
    # The killed POSIX write's temporary files went when the hop resumed, not 24 h later.
    assert _posix_files(tmp_path / "pfs")[1] == []
    assert _open_uploads(moto_server, s3.bucket) == []
    assert _open_uploads(rclone_server, dr.bucket) == []
    assert uploads(db) == []
    assert {r.tier: (r.state, r.bytes_done) for r in replicas(db, cid).values()} == {
        "nvme": ("verified", 0),
        "pfs": ("verified", sum(SIZES.values())),
        "s3": ("verified", sum(SIZES.values())),
        "dr": ("verified", sum(SIZES.values())),
    }
    # one job per hop: an interrupted job was requeued, never duplicated
    assert [(j.dst_tier, j.state, j.attempts) for j in all_jobs(db)] == [
        ("pfs", "done", 0),
        ("s3", "done", 0),
        ("dr", "done", 0),
    ]
    assert [e.action for e in audit(db)] == ["replica_verified"] * 3

    # resumed, not restarted: the run after each S3 kill loaded the recorded upload with
    # its parts, and no part was sent twice
    events = daemon.events()
    for tier, run in (("s3", 3), ("dr", 4)):
        assert any(cut_uploads[tier].values()), f"no part was recorded before the {tier} kill"
        loaded = {
            e["upload_id"]: e["parts"]
            for e in daemon.events(run)
            if e["event"] == "upload_resume_loaded" and e["tier"] == tier
        }
        assert loaded == cut_uploads[tier]
    assert [e for e in events if e["event"] in ("upload_restarted", "upload_part_resent")] == []
    assert [e["event"] for e in events if e["event"] == "jobs_requeued"] == ["jobs_requeued"] * 3
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak / MiB:.0f} MiB"


def _api_replica(port: int, tier: str) -> dict[str, Any]:
    """The replica on ``tier`` as ``GET /v1/checkpoints`` shows it."""
    [item] = http.get(f"http://127.0.0.1:{port}/v1/checkpoints", timeout=10).json()["items"]
    [replica] = [r for r in item["replicas"] if r["tier"] == tier]
    return dict(replica)


def _mid_hop(db: Database, cid: int, tier: str) -> bool:
    """The hop into ``tier`` has made progress that a resume can use, and is not done."""
    row = replicas(db, cid)[tier]
    if row.state != "copying" or row.bytes_done <= 0:
        return False
    if tier == "pfs":
        return True
    return any(parts for t, _, _, parts in uploads(db) if t == tier)


# Over two batches' worth (a batch holds 1,024 files): the first is committed ~3 s in, and the
# last ~5 s after it, a window a poll and a kill hit even at a load of 16 (1,500 files left 1.5 s,
# and once the whole hop was placed before the kill landed).
SMALL = {f"d{n % 4}/f{n:04d}.bin": 1024 + n % 512 for n in range(2600)} | {".metadata": 512}
SMALL_CAP = 400_000  # bytes/s: the ~3.3 MB hop takes ~8 s


@pytest.mark.slow
def test_kill_9_while_small_files_are_staged(tmp_path: Path) -> None:
    """Only committed files are ever visible or recorded done; a restart finishes the rest."""
    (tmp_path / "nvme").mkdir()
    (tmp_path / "pfs").mkdir()
    tiers: list[dict[str, Any]] = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs"), "bandwidth_limit": SMALL_CAP},
    ]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers))
    config = load_config(daemon.config_path)
    db = Database(config.catalog.url)
    data = write_files(tmp_path / "nvme" / "demo" / "step9", SMALL)
    expected = {f"demo/step9/{name}": content for name, content in data.items()}
    cid = record_checkpoint(db, config, "demo", 9, "demo/step9")
    try:
        daemon.start()
        try:
            wait_for(partial(_some_done, db), 60, "a committed batch to be recorded done")
        except AssertionError as exc:  # timed out once under load: say what the daemon did
            jobs = [(job.id, job.state, len(done_files(db, job.id))) for job in all_jobs(db)]
            raise AssertionError(f"{exc}; jobs (id, state, files done): {jobs}\n{daemon.tail()}") from None
        daemon.kill()
        assert states(db, cid)["pfs"] == "copying"
        shown = _posix_files(tmp_path / "pfs")[0]
        assert all(expected.get(k) == v for k, v in shown.items()), "partial file visible"
        [job] = all_jobs(db)
        recorded_done = done_files(db, job.id)
        assert recorded_done <= set(shown), "a file recorded done before its batch was committed"
        assert 0 < len(recorded_done) <= len(shown) < len(expected)
        daemon.start()
        wait_for(lambda: states(db, cid)["pfs"] == "verified", 60, "the pfs replica to be verified")
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()
    assert _posix_files(tmp_path / "pfs")[0] == expected, daemon.tail()


def _some_done(db: Database) -> bool:
    """The running job has recorded finished files (and is not finished)."""
    return any(job.state == "running" and done_files(db, job.id) for job in all_jobs(db))


BIG = {"shard0.distcp": 96 * MiB + 7, ".metadata": 4096}
BIG_CAP = 24 * MiB  # bytes/s into pfs: the 96 MiB file takes ~4 s, so a kill lands mid-file


@pytest.mark.slow
def test_kill_9_mid_copy_of_a_big_file_resumes_from_the_kept_prefix(tmp_path: Path) -> None:
    """The restarted hop keeps what the killed write had written (``copy_resumed``), copies the rest."""
    (tmp_path / "nvme").mkdir()
    (tmp_path / "pfs").mkdir()
    tiers: list[dict[str, Any]] = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs"), "bandwidth_limit": BIG_CAP},
    ]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers))
    config = load_config(daemon.config_path)
    db = Database(config.catalog.url)
    data = write_files(tmp_path / "nvme" / "demo" / "step5", BIG)
    expected = {f"demo/step5/{name}": content for name, content in data.items()}
    cid = record_checkpoint(db, config, "demo", 5, "demo/step5")
    try:
        daemon.start()
        # chunks finish 4 at a time, in order but for the last few: the prefix is most of this
        wait_for(lambda: replicas(db, cid)["pfs"].bytes_done >= 40 * MiB, 60, "40 MiB of the file copied")
        daemon.kill()
        assert states(db, cid)["pfs"] == "copying", "the kill must land during the hop"
        assert len(_posix_files(tmp_path / "pfs")[1]) == 1  # the killed write's temporary file
        daemon.start()
        wait_for(lambda: states(db, cid)["pfs"] == "verified", 60, "the hop to be verified")
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()
    finals, temps = _posix_files(tmp_path / "pfs")
    assert finals == expected, daemon.tail()
    assert temps == []
    [resumed] = [e for e in daemon.events(2) if e["event"] == "copy_resumed"]
    assert resumed["path"] == str(tmp_path / "pfs" / "demo" / "step5" / "shard0.distcp")
    assert 8 * MiB <= resumed["bytes_kept"] < BIG["shard0.distcp"]
    assert resumed["bytes_kept"] % (8 * MiB) == 0
    assert [e for e in daemon.events() if e["event"] == "copy_resume_mismatch"] == []
    assert (replicas(db, cid)["pfs"].state, replicas(db, cid)["pfs"].bytes_done) == (
        "verified",
        sum(BIG.values()),
    )
