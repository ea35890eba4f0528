"""The GCS tier driven through the real daemon, against gcp-storage-emulator.

kill -9 mid-upload: the resumable session recorded in the catalog is resumed, not begun
again, and no byte the session held is sent twice (the emulator refuses a chunk that does
not start where its bytes end, so a resent byte would fail the upload). End to end: detect,
copy, verify (the scrub's check) from the stored checksums, retention that deletes tier 0's
copy once GCS holds a verified one, and a restore that falls back past a replaced object.
"""

from __future__ import annotations

import urllib.request
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.gcsemulator import GcsEmulator
from tests.integration.daemon_helpers import (
    MiB,
    config_dict,
    record_checkpoint,
    replicas,
    states,
    tier_dict,
    uploads,
    wait_for,
    write_files,
)
from tests.integration.test_lifecycle_daemon import RUN, LabFactory, lab, posix_tier, tree
from tierd.config import load_config
from tierd.daemon.catalog.db import Database

CAP = 4 * MiB  # bytes/s into the GCS tier: the 23 MiB hop takes ~6 s, so the kill lands mid-hop
SIZES = {"shard0.distcp": 12 * MiB + 5, "shard1.distcp": 11 * MiB, ".metadata": 4096}


def _objects(emulator: GcsEmulator, bucket: str) -> dict[str, int]:
    return {o["name"]: int(o["size"]) for o in emulator.objects(bucket)}


def _mid_upload(db: Database, cid: int) -> bool:
    row = replicas(db, cid)["gcs"]
    return row.state == "copying" and any(parts for tier, _, _, parts in uploads(db) if tier == "gcs")


@pytest.mark.slow
def test_kill_9_mid_upload_resumes_the_recorded_session(tmp_path: Path, gcs_emulator: GcsEmulator) -> None:
    """Two daemon runs and ~23 MiB through a Python emulator: about 15 s on the 2-core machine."""
    gcs = gcs_emulator.new_tier("gcs", bandwidth_limit=CAP, concurrency=2)
    (tmp_path / "nvme").mkdir()
    tiers: list[dict[str, Any]] = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        tier_dict(gcs),
    ]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers))
    config = load_config(daemon.config_path)
    db = Database(config.catalog.url)
    data = write_files(tmp_path / "nvme" / "demo" / "step7", SIZES)
    cid = record_checkpoint(db, config, "demo", 7, "demo/step7")
    try:
        daemon.start()
        wait_for(partial(_mid_upload, db, cid), 60, "a chunk of the GCS upload to be recorded")
        daemon.kill()
        cut = {
            relpath: (upload_id, parts) for tier, relpath, upload_id, parts in uploads(db) if tier == "gcs"
        }
        shown = _objects(gcs_emulator, gcs.bucket)
        assert all(shown[name] == len(data[name.removeprefix("demo/step7/")]) for name in shown)
        daemon.start()
        wait_for(lambda: states(db, cid)["gcs"] == "verified", 90, "the GCS replica to be verified")
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()
    assert _objects(gcs_emulator, gcs.bucket) == {f"demo/step7/{name}": len(b) for name, b in data.items()}
    assert uploads(db) == []
    resumed = [e for e in daemon.events(2) if e["event"] == "gcs_session_resumed"]
    assert resumed, daemon.tail()
    assert {e["relpath"] for e in resumed} <= set(cut)
    for event in resumed:  # a session begun just before the kill may hold no chunk yet
        recorded = len(cut[event["relpath"]][1]) * int(gcs.chunk_size)
        assert event["recorded"] == recorded  # the recorded chunks were not read to be sent again
        assert event["held"] >= recorded
    assert max(e["recorded"] for e in resumed) > 0
    assert [e for e in daemon.events() if e["event"] == "upload_restarted"] == []
    assert replicas(db, cid)["gcs"].state == "verified"


def _overwrite(emulator: GcsEmulator, bucket: str, name: str, data: bytes) -> None:
    """Replace an object behind tierd's back (a media upload: no metadata of tierd's)."""
    url = (
        f"{emulator.endpoint_url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(name, safe='')}"
    )
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/octet-stream")
    with urllib.request.urlopen(request, timeout=30):  # loopback
        pass


def test_detect_copy_retention_verify_and_restore_with_fallback(
    lab: LabFactory, tmp_path: Path, gcs_emulator: GcsEmulator
) -> None:
    """posix tier 0 -> gcs -> pfs through the real daemon: about 10 s (three hops of two steps)."""
    gcs = gcs_emulator.new_tier("gcs")
    (tmp_path / "restores").mkdir()
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            tier_dict(gcs),
            posix_tier(tmp_path, "pfs"),
        ],
        restore={"allowed_roots": [str(tmp_path / "restores")]},
    )
    first = lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    second = lab_.write_step(2)
    wanted = {1: {"nvme": "deleted", "gcs": "verified", "pfs": "verified"}}
    wanted[2] = {"nvme": "verified", "gcs": "verified", "pfs": "verified"}
    lab_.converge(
        lambda: lab_.states() == wanted, "step 1 off nvme (verified on gcs first), step 2 everywhere"
    )
    assert _objects(gcs_emulator, gcs.bucket) == {k: len(v) for k, v in (first | second).items()}
    # verify (what a scrub does): from the stored checksums, every file ok
    answer = lab_.call("POST", f"/v1/checkpoints/{lab_.checkpoints()[2]['id']}/verify")
    assert answer.status_code == 200, answer.text
    assert {t["tier"]: t["result"] for t in answer.json()["tiers"]} == {
        "nvme": "ok",
        "gcs": "ok",
        "pfs": "ok",
    }
    # a shard of step 1 replaced behind tierd's back: the restore falls back to pfs
    shard = "demo/step1/__0_0.distcp"
    _overwrite(gcs_emulator, gcs.bucket, shard, bytes(len(first[shard])))
    target = tmp_path / "restores" / "one"
    asked = lab_.call("POST", "/v1/restores", json={"run": RUN, "step": 1, "target": str(target)})
    assert asked.status_code == 202, asked.text
    rid = asked.json()["id"]
    lab_.converge(lambda: lab_.call("GET", f"/v1/restores/{rid}").json()["state"] != "running", "the restore")
    done = lab_.call("GET", f"/v1/restores/{rid}").json()
    assert (done["state"], done["source_tier"]) == ("done", "gcs"), done
    [fallback] = done["fallbacks"]
    assert (fallback["file"], fallback["from_tier"], fallback["to_tier"]) == ("__0_0.distcp", "gcs", "pfs")
    assert tree(target) == {k.removeprefix("demo/step1/"): v for k, v in first.items()}
    assert lab_.daemon.terminate(30) == 0


__all__ = ["lab"]  # the fixture, shared with the lifecycle tests
