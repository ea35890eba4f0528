"""What each tier costs, end to end: a priced config file, the real daemon, ``tierd usage`` and HTTP.

Three steps of exactly 1 MiB (3 files), saved a minute ago, are moved into the watched
directory; the daemon copies each to ``pfs``, and ``nvme``'s retention (keep_last 2) deletes
step 1 there. Then ``tierd usage`` (a process forked from the zygote), ``GET /v1/usage`` and
``/metrics`` agree on the bytes and what they cost. A price changed in the file and a SIGHUP
show in the next answer and scrape.

Prices are per GiB, so they are set high enough that a MiB costs a readable amount: 1,024 a
GiB-month on pfs (1 MiB = 1.00) and 2,048 on nvme (2.00); 1,000 per 1,000 writes on pfs (1.00
each). All three steps were saved within the day: 3 steps a day for 30 days of 3 files each
is 270 writes a month, and pfs (which keeps all) will hold 3 + 90 MiB, nvme still 2.

More than 5 s because it is the whole path once: the daemon's start, three detections and
copies, a retention pass and two ``tierd`` processes (46 s at a load of 16 on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures import http
from tests.fixtures.daemon import Daemon, run_cli
from tests.integration.daemon_helpers import config_dict, wait_for, write_files

pytestmark = pytest.mark.xdist_group("usage_daemon")

RUN = "demo"
KiB, MiB = 1024, 1024 * 1024
STEP_FILES = {"__0_0.distcp": 512 * KiB, "__1_0.distcp": 256 * KiB, ".metadata": 256 * KiB}


def _config(root: Path) -> dict[str, Any]:
    for name in ("nvme", "pfs"):
        (root / name).mkdir()
    (root / "nvme" / RUN).mkdir()
    tiers: list[dict[str, Any]] = [
        {
            "name": "nvme",
            "kind": "posix",
            "path": str(root / "nvme"),
            "retention": {"keep_last": 2},
            "delete_delay": 0,
            "price_per_gb_month": 2048,
        },
        {
            "name": "pfs",
            "kind": "posix",
            "path": str(root / "pfs"),
            "price_per_gb_month": "1024",
            "price_per_1000_writes": "1000",
        },
    ]
    watch = [{"path": str(root / "nvme" / RUN), "run": RUN, "format": "dcp"}]
    return config_dict(root, tiers, watch=watch, retention={"interval": 0.5})


def _save(root: Path, step: int) -> None:
    """A step saved a minute ago (its files' mtimes are its save time), moved in whole."""
    staged = root / "staging" / f"step{step}"
    write_files(staged, STEP_FILES, seed=step)
    saved = time.time() - 60
    for i, name in enumerate(STEP_FILES):  # .metadata last, as DCP writes it
        os.utime(staged / name, (saved + i, saved + i))
    staged.rename(root / "nvme" / RUN / f"step{step}")


def _states(url: str) -> dict[int, dict[str, str]]:
    page = http.get(f"{url}/v1/checkpoints", params={"run": RUN}, timeout=10).json()
    return {c["step"]: {r["tier"]: r["state"] for r in c["replicas"]} for c in page["items"]}


def _storage_costs(url: str) -> dict[str, float]:
    """``tierd_tier_storage_cost_per_month`` by tier, as scraped."""
    exposition = http.get(f"{url}/metrics", timeout=10).text
    return {
        sample.labels["tier"]: sample.value
        for family in text_string_to_metric_families(exposition)
        if family.name == "tierd_tier_storage_cost_per_month"
        for sample in family.samples
    }


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """The daemon over the priced config, ready; stopped at the end."""
    daemon = Daemon.prepare(tmp_path, _config(tmp_path))
    daemon.start()
    try:
        daemon.wait_ready()
        yield daemon
    finally:
        daemon.stop()


def test_usage_prices_what_the_daemon_copied_and_retention_deleted(tmp_path: Path, daemon: Daemon) -> None:
    for step in (1, 2, 3):
        _save(tmp_path, step)
    wanted = {1: {"nvme": "deleted", "pfs": "verified"}} | {
        step: {"nvme": "verified", "pfs": "verified"} for step in (2, 3)
    }
    try:
        wait_for(lambda: _states(daemon.url) == wanted, 90, "three steps copied, step 1 deleted on nvme")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_states(daemon.url)}\n{daemon.tail()}") from None

    body = http.get(f"{daemon.url}/v1/usage", timeout=10).json()
    nvme, pfs = body["tiers"]
    assert (nvme["bytes"], nvme["storage_cost_per_month"]) == (2 * MiB, 4.0)
    assert (nvme["retention_deleted_checkpoints"], nvme["retention_deleted_bytes"]) == (1, MiB)
    assert nvme["retention_saved_per_month"] == 2.0
    assert (nvme["projected_bytes"], nvme["cost_per_month"]) == (2 * MiB, 4.0)
    assert (pfs["bytes"], pfs["files"], pfs["storage_cost_per_month"]) == (3 * MiB, 9, 3.0)
    assert (pfs["writes_per_month"], pfs["request_cost_per_month"], pfs["cost_per_month"]) == (
        270,
        270.0,
        273.0,
    )
    assert (pfs["retention_deleted_bytes"], pfs["projected_bytes"]) == (0, 93 * MiB)
    assert pfs["projected_cost_per_month"] == 93.0 + 270.0
    assert body["totals"]["cost_per_month"] == 277.0
    assert body["totals"]["retention_saved_per_month"] == 2.0
    assert body["runs"] == [
        {
            "run": RUN,
            "bytes": 5 * MiB,
            "tiers": {"nvme": 2 * MiB, "pfs": 3 * MiB},
            "steps_per_day": 3.0,
            "mean_step_bytes": MiB,
        }
    ]

    code, out = run_cli(["usage", "--url", daemon.url], tmp_path / "usage.log")
    assert code == 0, out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["nvme"][1:6] == ["default", "2.1", "MB", "4.00", "1.0"]
    assert rows["pfs"][1:5] == ["default", "3.1", "MB", "273.00"]
    assert rows["total"][:4] == ["total", "5.2", "MB", "277.00"]
    assert rows[RUN][1:5] == ["5.2", "MB", "3.0", "1.0"]
    code, out = run_cli(["usage", "--url", daemon.url, "--json"], tmp_path / "usage.log")
    assert (code, json.loads(out)["tiers"]) == (0, body["tiers"])

    assert _storage_costs(daemon.url) == {"nvme": 4.0, "pfs": 3.0}

    # pfs's price doubled in the file, then SIGHUP: the next answer and scrape take it
    data = yaml.safe_load(daemon.config_path.read_text())
    data["tiers"][1]["price_per_gb_month"] = "2048"
    daemon.config_path.write_text(yaml.safe_dump(data))
    daemon.signal(signal.SIGHUP)
    (reloaded,) = wait_for(lambda: daemon.logged("config_reloaded"), 30, "the reload")
    assert (reloaded["applied"], reloaded["need_restart"]) == (["tiers.1.price_per_gb_month"], [])
    pfs = http.get(f"{daemon.url}/v1/usage", timeout=10).json()["tiers"][1]
    assert (pfs["price_per_gb_month"], pfs["storage_cost_per_month"]) == (2048.0, 6.0)
    assert _storage_costs(daemon.url) == {"nvme": 4.0, "pfs": 6.0}
