"""``tiers[].price_per_gb_month`` and the per-request prices: decimals, optional, never negative."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import Config, load_config
from tierd.errors import ConfigError


def _load(tmp_path: Path, **prices: Any) -> Config:
    tiers = [
        {"name": "nvme", "kind": "posix", "path": "nvme"},
        {"name": "pfs", "kind": "posix", "path": "pfs", **prices},
    ]
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": tiers}))
    return load_config(path)


def test_prices_are_exact_decimals(tmp_path: Path) -> None:
    tier = _load(
        tmp_path, price_per_gb_month="0.023", price_per_1000_writes=0.005, price_per_1000_reads=0
    ).tiers[1]
    assert tier.price_per_gb_month == Decimal("0.023")
    assert tier.price_per_1000_writes == Decimal("0.005")
    assert tier.price_per_1000_reads == 0


def test_no_price_means_not_priced(tmp_path: Path) -> None:
    tier = _load(tmp_path).tiers[1]
    assert (tier.price_per_gb_month, tier.price_per_1000_writes, tier.price_per_1000_reads) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("price_per_gb_month", -0.01, "greater than or equal to 0"),
        ("price_per_gb_month", "cheap", "valid decimal"),
        ("price_per_gb_month", "nan", "finite number"),
        ("price_per_gb_month", True, "Decimal input"),
        ("price_per_1000_writes", "1e400", "less than or equal to 1000000"),
        ("price_per_1000_reads", [1], "Decimal input"),
    ],
)
def test_a_malformed_price_names_its_key(tmp_path: Path, key: str, value: Any, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, **{key: value})
    message = str(info.value)
    assert f"tiers.1.posix.{key}" in message
    assert reason in message
