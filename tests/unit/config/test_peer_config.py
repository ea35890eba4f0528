"""``kind: peer`` tiers, the ``peer`` token role and ``fleet.advertise_url`` / ``failure_domain``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import Config, load_config
from tierd.errors import ConfigError


def _load(tmp_path: Path, **top: Any) -> Config:
    data: dict[str, Any] = {
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
            {"name": "peers", "kind": "peer", "path": str(tmp_path / "peer")},
            {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
        ],
        **top,
    }
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _problems(tmp_path: Path, **top: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, **top)
    return "\n".join(caught.value.problems)


def test_the_peer_tier_stands_beside_the_chain(tmp_path: Path) -> None:
    config = _load(tmp_path)
    assert [t.name for t in config.tiers] == ["nvme", "pfs"]
    assert config.peer is not None
    assert (config.peer.name, config.peer.path, config.peer.replicas) == ("peers", tmp_path / "peer", 1)
    assert (config.peer.durable, config.peer.shared) == (False, False)


def test_one_peer_tier_at_most_and_never_durable_or_shared(tmp_path: Path) -> None:
    two = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "p1", "kind": "peer", "path": str(tmp_path / "p1")},
        {"name": "p2", "kind": "peer", "path": str(tmp_path / "p2")},
    ]
    assert "at most one tier may be kind: peer" in _problems(tmp_path, tiers=two)
    for key in ("durable", "shared"):
        tiers = [two[0], {**two[1], key: True}]
        assert f"{key}: a peer tier" in _problems(tmp_path, tiers=tiers)
    assert "replicas" in _problems(tmp_path, tiers=[two[0], {**two[1], "replicas": 0}])


def test_the_peer_directory_is_not_inside_tier0(tmp_path: Path) -> None:
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "peers", "kind": "peer", "path": str(tmp_path / "nvme" / "peer")},
    ]
    assert "must not hold one another" in _problems(tmp_path, tiers=tiers)


def test_a_peer_token_and_the_fleet_addresses(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        api={"tokens": [{"name": "peers", "token": "s3cret", "role": "peer"}]},
        fleet={"advertise_url": "https://node7.rack2:8470", "failure_domain": "rack2"},
    )
    assert config.api.tokens[0].role == "peer"
    assert (config.fleet.advertise_url, config.fleet.failure_domain) == ("https://node7.rack2:8470", "rack2")


@pytest.mark.parametrize(
    ("fleet", "key"),
    [
        ({"advertise_url": "node7:8470"}, "fleet.advertise_url"),
        ({"advertise_url": "https://node7:8470/v1"}, "fleet.advertise_url"),
        ({"failure_domain": "rack 2"}, "fleet.failure_domain"),
    ],
)
def test_a_malformed_fleet_address_names_its_key(tmp_path: Path, fleet: dict[str, str], key: str) -> None:
    assert key in _problems(tmp_path, fleet=fleet)
