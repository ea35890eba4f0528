"""A daemon's transfers and its peer tier's receiving take their buffers from one budget: a peer
daemon held its 32 MiB beside a receiving budget's 16 MiB (bench_peer's peak RSS)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tierd.config import load_config
from tierd.daemon.backends.peer.store import RECEIVE_BUDGET
from tierd.daemon.runtime import Daemon


def _peer_daemon(root: Path) -> Daemon:
    """A daemon with a POSIX tier 0 and a peer tier, built (not started)."""
    config = root / "tierd.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "catalog": {"url": f"sqlite:///{root / 'catalog.db'}"},
                "tiers": [
                    {"name": "nvme", "kind": "posix", "path": str(root / "nvme")},
                    {"name": "peers", "kind": "peer", "path": str(root / "peer")},
                    {"name": "pfs", "kind": "posix", "path": str(root / "pfs")},
                ],
            }
        )
    )
    return Daemon(load_config(config), config)


def test_the_peer_tier_receives_into_the_daemons_budget(tmp_path: Path) -> None:
    daemon = _peer_daemon(tmp_path)
    store = daemon.api.app.state.peer
    assert store is not None
    assert store.backend.budget is daemon.budget
    assert daemon.budget.limit > RECEIVE_BUDGET  # the daemon's 32 MiB, not a receiving budget's 16
    assert all(backend.budget is daemon.budget for backend in daemon.backends.values())
