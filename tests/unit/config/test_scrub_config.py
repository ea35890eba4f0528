"""``tiers[].scrub``: how often each replica is re-checked and how fast the scrub may read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import Config, ScrubConfig, load_config
from tierd.errors import ConfigError


def _load(tmp_path: Path, scrub: Any) -> Config:
    pfs: dict[str, Any] = {"name": "pfs", "kind": "posix", "path": "pfs"}
    if scrub is not None:
        pfs["scrub"] = scrub
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": [{"name": "nvme", "kind": "posix", "path": "nvme"}, pfs]}))
    return load_config(path)


def test_every_and_bandwidth_take_units(tmp_path: Path) -> None:
    config = _load(tmp_path, {"every": "7d", "bandwidth": "200MB"})
    assert config.tiers[1].scrub == ScrubConfig(every=7 * 86_400, bandwidth=200_000_000)
    binary = _load(tmp_path, {"every": 3600, "bandwidth": "1MiB"})
    assert binary.tiers[1].scrub == ScrubConfig(every=3600, bandwidth=1024 * 1024)


def test_no_scrub_block_means_no_scrubbing(tmp_path: Path) -> None:
    config = _load(tmp_path, None)
    assert [t.scrub for t in config.tiers] == [None, None]


@pytest.mark.parametrize(
    ("scrub", "key", "reason"),
    [
        ({"every": "often", "bandwidth": "1MB"}, "tiers.1.posix.scrub.every", "must be a duration"),
        ({"every": 0, "bandwidth": "1MB"}, "tiers.1.posix.scrub.every", "greater than 0"),
        ({"every": "7d", "bandwidth": "fast"}, "tiers.1.posix.scrub.bandwidth", "could not parse"),
        ({"every": "7d", "bandwidth": 0}, "tiers.1.posix.scrub.bandwidth", "greater than 0"),
        ({"every": "7d"}, "tiers.1.posix.scrub.bandwidth", "required key is missing"),
        ({"every": "7d", "bandwidth": "1MB", "rate": 2}, "tiers.1.posix.scrub.rate", "unknown key"),
    ],
)
def test_bad_settings_name_their_key(tmp_path: Path, scrub: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, scrub)
    message = str(info.value)
    assert key in message
    assert reason in message
