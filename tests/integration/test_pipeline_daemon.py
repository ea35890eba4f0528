"""The whole daemon: a checkpoint found by detection (a real PyTorch DCP save) and one
announced with ``POST /v1/checkpoints`` both travel nvme -> pfs -> S3, visible in the API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import config_dict, tier_dict, wait_for, write_files

DCP_SAVE = """
import sys, warnings, torch, torch.distributed.checkpoint as dcp
state = {"w": torch.arange(2_000_000, dtype=torch.float32), "b": torch.ones(10)}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # single-process save warns that no process group exists
    dcp.save(state, checkpoint_id=sys.argv[1])
"""


def _items(base: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(f"{base}/v1/checkpoints", timeout=10).json()["items"]
    return items


def _all_verified(base: str, count: int) -> list[dict[str, Any]] | None:
    items = _items(base)
    done = [i for i in items if all(r["state"] == "verified" for r in i["replicas"])]
    return items if len(items) == count and len(done) == count else None


@pytest.mark.slow
def test_detected_and_notified_checkpoints_reach_the_last_tier(tmp_path: Path, moto_server: S3Server) -> None:
    s3 = moto_server.new_tier("s3")
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
        tier_dict(s3),
    ]
    watch = [{"path": str(tmp_path / "nvme" / "demo"), "run": "demo"}]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers, watch=watch))
    base = daemon.url
    try:
        daemon.start()
        daemon.wait_ready(30)
        step5 = tmp_path / "nvme" / "demo" / "step5"
        subprocess.run([sys.executable, "-c", DCP_SAVE, str(step5)], check=True, timeout=120)
        write_files(tmp_path / "nvme" / "jobs" / "step6", {"model.bin": 3_000_000, "done": 10})
        answer = http.post(f"{base}/v1/checkpoints", json={"run": "other", "step": 6, "path": "jobs/step6"})
        assert answer.status_code == 201, answer.text
        items = wait_for(lambda: _all_verified(base, 2), 60, "both checkpoints on every tier", interval=0.2)
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()

    assert {(i["run"], i["step"], i["format"]) for i in items} == {
        ("demo", 5, "dcp"),
        ("other", 6, "unknown"),
    }
    for item in items:
        for replica in item["replicas"]:
            if replica["tier_index"] > 0:
                assert replica["bytes_done"] == item["total_bytes"]
                assert replica["error"] is None
    source = {
        str(p.relative_to(tmp_path / "nvme")): p.read_bytes()
        for p in (tmp_path / "nvme").rglob("*")
        if p.is_file()
    }
    assert any(k.endswith(".metadata") for k in source)
    pfs = {
        str(p.relative_to(tmp_path / "pfs")): p.read_bytes()
        for p in (tmp_path / "pfs").rglob("*")
        if p.is_file()
    }
    assert pfs == source
    client = moto_server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3.bucket)["Contents"]]
    assert {k: client.get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys} == source


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
