"""An S3 tier's ``storage_class``, ``server_side_encryption``, ``sse_kms_key_id`` and ``object_lock``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import Config, S3Tier, load_config
from tierd.errors import ConfigError


def _load(tmp_path: Path, **keys: Any) -> Config:
    bucket = {"name": "cold", "kind": "s3", "bucket": "bucket", **keys}
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": [{"name": "nvme", "kind": "posix", "path": "nvme"}, bucket]}))
    return load_config(path)


def test_the_keys_are_read_and_absent_means_the_stores_default(tmp_path: Path) -> None:
    tier = _load(
        tmp_path,
        storage_class="GLACIER_IR",
        server_side_encryption="aws:kms",
        sse_kms_key_id="alias/checkpoints",
        object_lock=True,
    ).tiers[1]
    assert isinstance(tier, S3Tier)
    assert (tier.storage_class, tier.server_side_encryption, tier.sse_kms_key_id, tier.object_lock) == (
        "GLACIER_IR",
        "aws:kms",
        "alias/checkpoints",
        True,
    )
    plain = _load(tmp_path).tiers[1]
    assert isinstance(plain, S3Tier)
    assert (plain.storage_class, plain.server_side_encryption, plain.sse_kms_key_id) == (None, None, None)
    assert not plain.object_lock


@pytest.mark.parametrize(
    ("keys", "key", "reason"),
    [
        ({"storage_class": "Archive"}, "tiers.1.s3.storage_class", "STANDARD_IA"),
        ({"storage_class": "REDUCED_REDUNDANCY"}, "tiers.1.s3.storage_class", "GLACIER_IR"),
        ({"server_side_encryption": "aws:kms:dsse"}, "tiers.1.s3.server_side_encryption", "AES256"),
        ({"sse_kms_key_id": "alias/x"}, "sse_kms_key_id", "needs server_side_encryption: aws:kms"),
        (
            {"sse_kms_key_id": "alias/x", "server_side_encryption": "AES256"},
            "sse_kms_key_id",
            "needs server_side_encryption: aws:kms",
        ),
        ({"storage_class": "GLACIER", "verify": "readback"}, "verify: readback", "storage_class GLACIER"),
        (
            {"storage_class": "DEEP_ARCHIVE", "scrub": {"every": "7d", "bandwidth": "1MB"}},
            "scrub",
            "storage_class DEEP_ARCHIVE",
        ),
        ({"object_lock": "maybe"}, "tiers.1.s3.object_lock", "bool"),
    ],
)
def test_bad_settings_name_their_key(tmp_path: Path, keys: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, **keys)
    message = str(info.value)
    assert key in message
    assert reason in message


def test_a_posix_tier_takes_none_of_them(tmp_path: Path) -> None:
    path = tmp_path / "tierd.yaml"
    tiers = [{"name": "nvme", "kind": "posix", "path": "nvme", "storage_class": "STANDARD_IA"}]
    path.write_text(yaml.safe_dump({"tiers": tiers}))
    with pytest.raises(ConfigError, match=r"tiers\.0\.posix\.storage_class"):
        load_config(path)
