"""The daemon's peak RSS stays under 200 MiB for a checkpoint far bigger than its buffers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import (
    MiB,
    config_dict,
    record_checkpoint,
    states,
    tier_dict,
    wait_for,
    write_files,
)
from tierd.config import load_config
from tierd.daemon.catalog.db import Database

PEAK_RSS_LIMIT = 200 * MiB


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.slow
@pytest.mark.parametrize(
    "part_size",
    [
        pytest.param(16 * MiB, id="buffered-parts"),
        pytest.param(64 * MiB, id="streamed-parts"),
    ],
)
def test_peak_rss_is_bounded(tmp_path: Path, moto_server: S3Server, part_size: int) -> None:
    s3 = moto_server.new_tier("s3", part_size=part_size)
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
    tiers: list[dict[str, Any]] = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
        tier_dict(s3),
    ]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers), exec=True)  # its own memory
    config = load_config(daemon.config_path)
    db = Database(config.catalog.url)
    write_files(tmp_path / "nvme" / "r" / "s1", {f"shard{i}.bin": 128 * MiB for i in range(4)})
    cid = record_checkpoint(db, config, "r", 1, "r/s1")
    try:
        daemon.start()
        assert daemon.pid is not None
        pid = daemon.pid
        wait_for(lambda: states(db, cid)["s3"] == "verified", 120, "both hops", interval=0.2)
        peak = _peak_rss(pid)
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak / MiB:.0f} MiB for a {4 * 128} MiB checkpoint"
