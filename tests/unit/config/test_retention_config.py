"""Retention keys: every valid form parses, every invalid one names its key and the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import (
    Config,
    FreeSpace,
    PosixTier,
    S3Tier,
    SpaceAmount,
    load_config,
    parse_duration,
    parse_space,
)
from tierd.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]

Data = dict[str, Any]


def _base() -> Data:
    return {
        "watch": [{"path": "ckpt/demo", "run": "demo"}],
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": "ckpt"},
            {"name": "pfs", "kind": "posix", "path": "pfs"},
            {"name": "object", "kind": "s3", "bucket": "ckpt"},
        ],
    }


def _load(tmp_path: Path, data: Data) -> Config:
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _with(mutate: Callable[[Data], object]) -> Data:
    data = _base()
    mutate(data)
    return data


def test_defaults_keep_everything_and_only_tier0_is_not_durable(tmp_path: Path) -> None:
    config = _load(tmp_path, _base())
    assert [t.durable for t in config.tiers] == [False, True, True]
    for tier in config.tiers:
        assert tier.retention.keeps_everything
        assert tier.delete_delay == 3600
        assert tier.verify_before_delete == "checksum"
    assert isinstance(config.tiers[0], PosixTier)
    assert config.tiers[0].free_space is None
    assert config.retention.dry_run is False
    assert config.retention.interval == 60


def test_the_example_config_deletes_nothing() -> None:
    config = load_config(REPO / "config.example.yaml")
    assert all(t.retention.keeps_everything for t in config.tiers)
    assert config.retention.dry_run is False
    assert all(not isinstance(t, PosixTier) or t.free_space is None for t in config.tiers)


def test_durable_is_explicit_when_given(tmp_path: Path) -> None:
    data = _base()
    data["tiers"][0]["durable"] = True
    data["tiers"][2]["durable"] = False
    assert [t.durable for t in _load(tmp_path, data).tiers] == [True, True, False]


def test_durable_default_applies_to_tier_models_given_directly() -> None:
    config = Config(
        tiers=[
            PosixTier(name="nvme", kind="posix", path=Path("/a")),
            PosixTier(name="pfs", kind="posix", path=Path("/b")),
        ]
    )
    assert [t.durable for t in config.tiers] == [False, True]


def test_every_retention_key_parses(tmp_path: Path) -> None:
    data = _base()
    data["tiers"][0].update(
        retention={
            "keep_last": 3,
            "keep_every_steps": 1000,
            "keep_within": "36h",
            "keep_best": {"metric": "eval_loss", "n": 2, "mode": "min"},
        },
        delete_delay=0,
        verify_before_delete="size",
        free_space={"evict_below": "15%", "evict_to": "25%"},
    )
    data["tiers"][2]["retention"] = {"keep_within": 600}
    data["retention"] = {"dry_run": True, "interval": "90s"}
    config = _load(tmp_path, data)
    nvme = config.tiers[0]
    assert isinstance(nvme, PosixTier)
    assert nvme.retention.keep_last == 3
    assert nvme.retention.keep_every_steps == 1000
    assert nvme.retention.keep_within == 36 * 3600
    assert nvme.retention.keep_best is not None
    assert (nvme.retention.keep_best.metric, nvme.retention.keep_best.n) == ("eval_loss", 2)
    assert nvme.retention.keep_best.mode == "min"
    assert not nvme.retention.keeps_everything
    assert nvme.delete_delay == 0
    assert nvme.verify_before_delete == "size"
    assert nvme.free_space == FreeSpace(
        evict_below=SpaceAmount(15, percent=True), evict_to=SpaceAmount(25, percent=True)
    )
    assert config.tiers[2].retention.keep_within == 600
    assert config.retention.dry_run is True
    assert config.retention.interval == 90


def test_an_empty_retention_block_keeps_everything(tmp_path: Path) -> None:
    data = _base()
    data["tiers"][0]["retention"] = None
    data["tiers"][1]["retention"] = {}
    config = _load(tmp_path, data)
    assert config.tiers[0].retention.keeps_everything
    assert config.tiers[1].retention.keeps_everything


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (0, 0.0),
        (45, 45.0),
        (2.5, 2.5),
        ("30", 30.0),
        ("30s", 30.0),
        ("90m", 5400.0),
        ("36h", 129_600.0),
        ("7d", 604_800.0),
        ("2w", 1_209_600.0),
        (" 1.5H ", 5400.0),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-5", -1, "1y", "h", True, None, [1], float("inf")])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("15%", SpaceAmount(15, percent=True)),
        (" 2.5% ", SpaceAmount(2.5, percent=True)),
        ("200GB", SpaceAmount(200 * 10**9, percent=False)),
        ("1TiB", SpaceAmount(2**40, percent=False)),
        (4096, SpaceAmount(4096, percent=False)),
        ("4096", SpaceAmount(4096, percent=False)),
    ],
)
def test_space_amounts(text: object, amount: SpaceAmount) -> None:
    assert parse_space(text) == amount


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("0%", "above 0%"),
        ("100%", "below 100%"),
        ("abc%", "percent of the file system"),
        ("lots", "percent of the file system"),
        (0, "above 0 bytes"),
        (1.5, "percent of the file system"),
        (True, "percent of the file system"),
        (None, "percent of the file system"),
    ],
)
def test_bad_space_amounts(text: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_space(text)


def test_space_amount_in_bytes() -> None:
    assert SpaceAmount(15, percent=True).bytes_of(1000) == 150
    assert SpaceAmount(12.5, percent=True).bytes_of(1001) == 126  # rounded up: never below the mark
    assert SpaceAmount(4096, percent=False).bytes_of(10) == 4096
    assert str(SpaceAmount(15, percent=True)) == "15%"
    assert str(SpaceAmount(4096, percent=False)) == "4096 bytes"


def test_free_space_marks_and_the_mixed_run_time_check(tmp_path: Path) -> None:
    data = _base()
    data["tiers"][0]["free_space"] = {"evict_below": "10%", "evict_to": "100GB"}
    tier = _load(tmp_path, data).tiers[0]
    assert isinstance(tier, PosixTier)
    assert tier.free_space is not None
    assert tier.free_space.marks(500 * 10**9) == (50 * 10**9, 100 * 10**9)
    with pytest.raises(ConfigError, match=r"free_space: evict_to \(100000000000 bytes\)"):
        tier.free_space.marks(2000 * 10**9)  # 10% is 200 GB there: the high mark is below
    assert tier.model_dump()["free_space"] == {"evict_below": "10%", "evict_to": 100 * 10**9}


def test_environment_overrides_the_global_retention_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERD_RETENTION__DRY_RUN", "true")
    monkeypatch.setenv("TIERD_RETENTION__INTERVAL", "5m")
    config = _load(tmp_path, _base())
    assert config.retention.dry_run is True
    assert config.retention.interval == 300


def _set(tier: int, **keys: object) -> Callable[[Data], object]:
    return lambda d: d["tiers"][tier].update(keys)


def _retain(tier: int, **keys: object) -> Callable[[Data], object]:
    return _set(tier, retention=keys)


_BEST = {"metric": "eval_loss", "n": 3, "mode": "min"}

BAD: list[tuple[Callable[[Data], object], str, str]] = [
    (_set(0, durable="sometimes"), "tiers.0.posix.durable", "boolean"),
    (_set(2, durable=None), "tiers.2.s3.durable", "boolean"),
    (_retain(0, keep_last=0), "tiers.0.posix.retention.keep_last", "greater than or equal to 1"),
    (_retain(1, keep_last="three"), "tiers.1.posix.retention.keep_last", "integer"),
    (_retain(0, keep_every_steps=0), "tiers.0.posix.retention.keep_every_steps", "greater than or equal"),
    (_retain(2, keep_every_steps=2.5), "tiers.2.s3.retention.keep_every_steps", "integer"),
    (_retain(0, keep_within="7 days"), "tiers.0.posix.retention.keep_within", "duration such as"),
    (_retain(0, keep_within=0), "tiers.0.posix.retention.keep_within", "greater than 0"),
    (_retain(0, keep_within="-1h"), "tiers.0.posix.retention.keep_within", "duration such as"),
    (_retain(0, keep_best={"n": 3, "mode": "min"}), "retention.keep_best.metric", "required key"),
    (_retain(0, keep_best={**_BEST, "metric": ""}), "retention.keep_best.metric", "at least 1"),
    (_retain(0, keep_best={**_BEST, "n": 0}), "retention.keep_best.n", "greater than or equal to 1"),
    (_retain(0, keep_best={**_BEST, "mode": "lowest"}), "retention.keep_best.mode", "'min' or 'max'"),
    (_retain(0, keep_best={"metric": "loss", "n": 1}), "retention.keep_best.mode", "required key"),
    (_retain(0, keep_best={**_BEST, "top": 1}), "retention.keep_best.top", "unknown key"),
    (_retain(0, keep_last=3, keep_first=1), "tiers.0.posix.retention.keep_first", "unknown key"),
    (_set(0, retention="forever"), "tiers.0.posix.retention", "valid dictionary"),
    (_set(1, delete_delay="soon"), "tiers.1.posix.delete_delay", "duration such as"),
    (_set(1, delete_delay=-1), "tiers.1.posix.delete_delay", "not negative"),
    (_set(2, verify_before_delete="hash"), "tiers.2.s3.verify_before_delete", "'checksum' or 'size'"),
    (_set(0, free_space={"evict_below": "15%"}), "tiers.0.posix.free_space.evict_to", "required key"),
    (_set(0, free_space={"evict_to": "15%"}), "tiers.0.posix.free_space.evict_below", "required key"),
    (
        _set(0, free_space={"evict_below": "25%", "evict_to": "15%"}),
        "tiers.0.posix.free_space",
        "evict_to (15%) must leave more free space than evict_below (25%)",
    ),
    (
        _set(0, free_space={"evict_below": "1TB", "evict_to": "1TB"}),
        "tiers.0.posix.free_space",
        "must leave more free space",
    ),
    (
        _set(0, free_space={"evict_below": "0%", "evict_to": "10%"}),
        "tiers.0.posix.free_space.evict_below",
        "above 0%",
    ),
    (
        _set(0, free_space={"evict_below": "5%", "evict_to": "lots"}),
        "tiers.0.posix.free_space.evict_to",
        "percent of the file system",
    ),
    (
        _set(0, free_space={"evict_below": "5%", "evict_to": "9%", "evict_at": "1%"}),
        "tiers.0.posix.free_space.evict_at",
        "unknown key",
    ),
    (
        _set(2, free_space={"evict_below": "5%", "evict_to": "9%"}),
        "tiers.2.s3",
        "free_space: only POSIX tiers take free_space",
    ),
    (lambda d: d.update(retention={"dry_run": "maybe"}), "retention.dry_run", "boolean"),
    (lambda d: d.update(retention={"interval": 0}), "retention.interval", "greater than 0"),
    (lambda d: d.update(retention={"interval": "often"}), "retention.interval", "duration such as"),
    (lambda d: d.update(retention={"keep_last": 3}), "retention.keep_last", "unknown key"),
]


@pytest.mark.parametrize(("mutate", "key", "reason"), BAD)
def test_errors_name_the_key_and_the_reason(
    tmp_path: Path, mutate: Callable[[Data], object], key: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, _with(mutate))
    message = str(info.value)
    assert key in message
    assert reason in message


def test_s3_tiers_take_the_retention_keys_too(tmp_path: Path) -> None:
    data = _base()
    data["tiers"][2].update(retention={"keep_last": 10, "keep_every_steps": 5000}, delete_delay="2h")
    tier = _load(tmp_path, data).tiers[2]
    assert isinstance(tier, S3Tier)
    assert (tier.retention.keep_last, tier.retention.keep_every_steps) == (10, 5000)
    assert tier.delete_delay == 7200
