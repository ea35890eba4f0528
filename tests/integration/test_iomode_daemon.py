"""A real daemon says how each POSIX tier writes big files: measured (``io_mode: auto``) or configured."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.integration.daemon_helpers import config_dict, wait_for, write_files

MIB = 1024 * 1024


def _verified_everywhere(base: str) -> bool:
    items = http.get(f"{base}/v1/checkpoints", timeout=10).json()["items"]
    return len(items) == 1 and all(r["state"] == "verified" for r in items[0]["replicas"])


def _io_modes(base: str) -> dict[str, tuple[str | None, str | None]]:
    """Each tier's ``io_mode`` and ``io_mode_reason`` as ``GET /v1/tiers`` shows them."""
    answer = http.get(f"{base}/v1/tiers", timeout=10)
    assert answer.status_code == 200, answer.text
    return {t["name"]: (t["io_mode"], t["io_mode_reason"]) for t in answer.json()}


def test_the_daemon_logs_each_tiers_choice_and_copies_by_it(tmp_path: Path) -> None:
    """nvme -> pfs (auto: probed at its first big file) -> deep (configured ``buffered``).

    ``GET /v1/tiers`` shows no choice before the first big write, then each tier's as logged.
    """
    for name in ("nvme", "pfs", "deep"):
        (tmp_path / name).mkdir()
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
        {"name": "deep", "kind": "posix", "path": str(tmp_path / "deep"), "io_mode": "buffered"},
    ]
    files = write_files(tmp_path / "nvme" / "jobs" / "step1", {"model.bin": 20 * MIB + 7, "done": 10})
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers))
    try:
        daemon.start()
        daemon.wait_ready(30)
        before = _io_modes(daemon.url)
        answer = http.post(f"{daemon.url}/v1/checkpoints", json={"run": "r", "step": 1, "path": "jobs/step1"})
        assert answer.status_code == 201, answer.text
        wait_for(
            lambda: _verified_everywhere(daemon.url), 60, "the step verified on every tier", interval=0.2
        )
        pfs = daemon.logged("io_mode_chosen", tier="pfs")
        deep = daemon.logged("io_mode_chosen", tier="deep")
        after = _io_modes(daemon.url)
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()
    assert len(pfs) == 1, daemon.tail()
    assert pfs[0]["configured"] == "auto"
    assert pfs[0]["mode"] in ("direct", "buffered")
    # Measured both ways (or refused outright, as tmpfs does): the reason gives the rates.
    assert "MB/s" in pfs[0]["reason"] or "refuses O_DIRECT" in pfs[0]["reason"], pfs[0]
    assert [(e["mode"], e["configured"], e["reason"]) for e in deep] == [
        ("buffered", "buffered", "configured")
    ]
    assert before == {"nvme": (None, None), "pfs": (None, None), "deep": (None, None)}
    assert after == {
        "nvme": (None, None),  # never written: nothing to choose
        "pfs": (pfs[0]["mode"], pfs[0]["reason"]),
        "deep": ("buffered", "configured"),
    }
    assert os.listdir(tmp_path / "pfs") == ["jobs"]  # the probe's file is gone
    for tier in ("pfs", "deep"):
        copied = tmp_path / tier / "jobs" / "step1"
        assert {name: (copied / name).read_bytes() for name in files} == files
