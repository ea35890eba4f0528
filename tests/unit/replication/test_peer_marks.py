"""A peer directory on tier 0's file system must be relieved first: ``check_marks`` at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.tmpfs import small_disk
from tierd.config import Config, load_config
from tierd.daemon.replication.eviction import check_marks
from tierd.errors import ConfigError

TIER0_MARKS = {"evict_below": "10%", "evict_to": "20%"}


def _config(tmp_path: Path, nvme: Path, peer: Path, peer_marks: dict[str, str] | None) -> Config:
    tier: dict[str, Any] = {"name": "peers", "kind": "peer", "path": str(peer)}
    if peer_marks is not None:
        tier["free_space"] = peer_marks
    data = {
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": str(nvme), "free_space": TIER0_MARKS},
            tier,
            {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
        ]
    }
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


@pytest.mark.parametrize("marks", [None, TIER0_MARKS, {"evict_below": "5%", "evict_to": "30%"}])
def test_refused_when_tier0_would_evict_its_own_data_first(
    tmp_path: Path, marks: dict[str, str] | None
) -> None:
    (tmp_path / "nvme").mkdir()
    config = _config(tmp_path, tmp_path / "nvme", tmp_path / "nvme-peer" / "held", marks)  # not made yet
    with pytest.raises(ConfigError) as caught:
        check_marks(config)
    (problem,) = caught.value.problems
    assert problem.startswith("tiers.peers.free_space: the peer directory")
    assert "evicts below 10%" in problem
    assert "go before this node's own data" in problem


def test_accepted_when_the_peer_tier_evicts_at_a_higher_mark(tmp_path: Path) -> None:
    (tmp_path / "nvme").mkdir()
    config = _config(
        tmp_path, tmp_path / "nvme", tmp_path / "peer", {"evict_below": "15%", "evict_to": "25%"}
    )
    check_marks(config)


def test_accepted_on_another_file_system_whatever_the_marks(tmp_path: Path) -> None:
    (tmp_path / "nvme").mkdir()
    with small_disk(tmp_path / "peer-disk", 4 << 20) as disk:
        check_marks(_config(tmp_path, tmp_path / "nvme", disk.path / "peer", None))
