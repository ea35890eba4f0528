"""``tiers[].shared``: which tiers every daemon of a fleet sees, and which only its own node's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import Config, PosixTier, load_config
from tierd.errors import ConfigError


def _tiers(*shared: bool | None) -> list[dict[str, Any]]:
    names = ["nvme", "pfs", "object"]
    tiers: list[dict[str, Any]] = []
    for name, flag in zip(names, shared, strict=False):
        tier: dict[str, Any] = {"name": name, "kind": "posix", "path": name}
        if flag is not None:
            tier["shared"] = flag
        tiers.append(tier)
    return tiers


def _load(tmp_path: Path, tiers: list[dict[str, Any]]) -> Config:
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": tiers}))
    return load_config(path)


def test_tier0_is_node_local_and_every_other_tier_shared_by_default(tmp_path: Path) -> None:
    config = _load(tmp_path, _tiers(None, None, None))
    assert [t.shared for t in config.tiers] == [False, True, True]


def test_a_shared_tier0_is_said_so(tmp_path: Path) -> None:
    config = _load(tmp_path, _tiers(True, None, None))
    assert [t.shared for t in config.tiers] == [True, True, True]


def test_two_node_local_tiers_first(tmp_path: Path) -> None:
    config = _load(tmp_path, _tiers(None, False, None))
    assert [t.shared for t in config.tiers] == [False, False, True]


def test_a_node_local_tier_after_a_shared_one_is_refused_by_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, _tiers(None, None, False))
    assert "tiers.2.shared" in str(info.value)
    assert "cannot follow a shared one (pfs)" in str(info.value)


def test_a_non_boolean_shared_names_its_key(tmp_path: Path) -> None:
    tiers = _tiers(None, None)
    tiers[1]["shared"] = "sometimes"
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, tiers)
    assert "tiers.1.posix.shared" in str(info.value)


def test_the_default_applies_to_tier_models_given_directly() -> None:
    config = Config(
        tiers=[
            PosixTier(name="nvme", kind="posix", path=Path("/a")),
            PosixTier(name="pfs", kind="posix", path=Path("/b")),
        ]
    )
    assert [t.shared for t in config.tiers] == [False, True]
    explicit = Config(tiers=[PosixTier(name="nvme", kind="posix", path=Path("/a"), shared=True)])
    assert explicit.tiers[0].shared is True


def test_config_finds_a_tier_by_name() -> None:
    config = Config(
        tiers=[
            PosixTier(name="nvme", kind="posix", path=Path("/a")),
            PosixTier(name="pfs", kind="posix", path=Path("/b")),
        ]
    )
    assert config.tier("pfs").path == Path("/b")  # type: ignore[union-attr]
    with pytest.raises(KeyError):
        config.tier("tape")
