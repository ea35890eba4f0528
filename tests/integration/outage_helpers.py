"""Helpers for the daemon tests where a disk fills or the catalog goes away: hand-made DCP
steps, a two-tier daemon watching ``nvme/demo``, and reading its API and its logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.integration.daemon_helpers import config_dict, write_files

__all__ = [
    "checkpoint",
    "two_tier_daemon",
    "dcp_step",
    "get",
    "logged",
    "no_tracebacks",
    "replica",
]


def dcp_step(root: Path, sizes: dict[str, int], seed: int) -> dict[str, bytes]:
    """A hand-made DCP step: shards first, ``.metadata`` last."""
    return write_files(root, {**sizes, ".metadata": 100}, seed=seed)


def two_tier_daemon(
    tmp_path: Path, catalog_url: str | None = None, *, pfs_rate: int | None = None
) -> tuple[Daemon, str]:
    """A prepared (migrated, not started) daemon: nvme -> pfs under ``tmp_path``, watching
    ``nvme/demo`` as run ``demo``; ``pfs_rate`` caps pfs in bytes per second. Its API's URL."""
    (tmp_path / "nvme" / "demo").mkdir(parents=True)
    (tmp_path / "pfs").mkdir(exist_ok=True)
    pfs: dict[str, Any] = {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")}
    if pfs_rate is not None:
        pfs["bandwidth_limit"] = pfs_rate
    tiers = [{"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")}, pfs]
    data = config_dict(tmp_path, tiers, watch=[{"path": str(tmp_path / "nvme" / "demo"), "run": "demo"}])
    if catalog_url is not None:
        data["catalog"] = {"url": catalog_url}
    daemon = Daemon.prepare(tmp_path, data)
    return daemon, daemon.url


def get(base: str, path: str) -> httpx.Response:
    return http.get(f"{base}{path}", timeout=10)


def checkpoint(base: str, step: int) -> dict[str, Any] | None:
    items: list[dict[str, Any]] = get(base, "/v1/checkpoints").json()["items"]
    return next((i for i in items if i["step"] == step), None)


def replica(base: str, step: int, tier: str) -> dict[str, Any] | None:
    item = checkpoint(base, step)
    return next((r for r in item["replicas"] if r["tier"] == tier), None) if item else None


def logged(daemon: Daemon, event: str, **fields: Any) -> list[dict[str, Any]]:
    return daemon.logged(event, **fields)


def no_tracebacks(daemon: Daemon) -> None:
    crashed = [e for e in daemon.events() if "exception" in e or e.get("level") == "critical"]
    assert crashed == [], crashed
