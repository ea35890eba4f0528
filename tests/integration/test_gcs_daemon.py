"""The GCS tier driven through the real daemon, against gcp-storage-emulator.

kill -9 mid-upload: the resumable session recorded in the catalog is resumed, not begun
again, and no byte the session held is sent twice (the emulator refuses a chunk that does
not start where its bytes end, so a resent byte would fail the upload).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

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
from tierd.config import load_config
from tierd.daemon.catalog.db import Database

CAP = 4 * MiB  # bytes/s into the GCS tier: the 23 MiB hop takes ~6 s, so the kill lands mid-hop
SIZES = {"shard0.distcp": 12 * MiB + 5, "shard1.distcp": 11 * MiB, ".metadata": 4096}


def _objects(emulator: GcsEmulator, bucket: str) -> dict[str, int]:
    return {o["name"]: int(o["size"]) for o in emulator.objects(bucket)}


def _mid_upload(db: Database, cid: int) -> bool:
    row = replicas(db, cid)["gcs"]
    return row.state == "copying" and any(parts for tier, _, _, parts in uploads(db) if tier == "gcs")


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


pytestmark = pytest.mark.slow
