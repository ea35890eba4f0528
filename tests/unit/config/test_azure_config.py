"""The azure tier's config: defaults, secrets kept secret, and errors that name the key (issue 28)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import AzureTier, load_config
from tierd.errors import ConfigError

KEY = "c2VjcmV0LWtleS1ieXRlcw=="


def _config(tmp_path: Path, **azure: Any) -> Path:
    tier = {"name": "blob", "kind": "azure", "account": "ckptstore", "container": "checkpoints"} | azure
    data = {
        "watch": [{"path": "ckpt/demo", "run": "demo"}],
        "tiers": [{"name": "nvme", "kind": "posix", "path": "ckpt"}, tier],
    }
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_defaults_and_normalisation(tmp_path: Path) -> None:
    tier = load_config(_config(tmp_path, prefix="runs", account_key=KEY)).tiers[1]
    assert isinstance(tier, AzureTier)
    assert tier.prefix == "runs/"
    assert tier.storage_class is None
    assert tier.encryption_scope is None
    assert int(tier.block_size) == 16 * 1024 * 1024
    assert KEY not in repr(tier)  # a SecretStr


@pytest.mark.parametrize(
    ("fields", "key", "reason"),
    [
        ({"storage_class": "Glacier"}, "tiers.1.azure.storage_class", "'Hot', 'Cool', 'Cold' or 'Archive'"),
        ({"account": "Bad_Name"}, "tiers.1.azure.account", "should match pattern"),
        ({"container": "ab--cd"}, "tiers.1.azure.container", "two dashes"),
        ({"container": "UPPER"}, "tiers.1.azure.container", "should match pattern"),
        ({"account_key": KEY, "sas_token": "sv=1&sig=x"}, "tiers.1.azure", "give one credential"),
        ({"sas_token": "sv=2024-01-01&sp=rw"}, "tiers.1.azure.sas_token", "no sig= field"),
        ({"block_size": "512KiB"}, "tiers.1.azure.block_size", "greater than or equal"),
        ({"encryption_scope": "a b"}, "tiers.1.azure.encryption_scope", "should match pattern"),
        ({"free_space": {"evict_below": "10%", "evict_to": "20%"}}, "free_space", "only POSIX tiers"),
        ({"prefix": "x" * 1024}, "tiers.1.azure.prefix", "a blob name"),
        ({"bucket": "b"}, "tiers.1.azure.bucket", "unknown key"),
    ],
)
def test_errors_name_the_key_and_the_reason(
    tmp_path: Path, fields: dict[str, Any], key: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, **fields))
    message = str(info.value)
    assert key in message
    assert reason in message
    assert "sig=x" not in message
    assert KEY not in message
