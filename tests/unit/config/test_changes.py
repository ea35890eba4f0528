"""What a reload applies and what waits for a restart (``tierd.config.changes``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tierd.config import Config
from tierd.config.changes import config_changes


def _data(root: Path) -> dict[str, Any]:
    return {
        "catalog": {"url": f"sqlite:///{root / 'catalog.db'}"},
        "api": {"listen": "127.0.0.1:8470", "tokens": [{"name": "ops", "token": "first", "role": "admin"}]},
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": str(root / "nvme")},
            {"name": "pfs", "kind": "posix", "path": str(root / "pfs"), "concurrency": 4},
        ],
    }


def test_nothing_changed(tmp_path: Path) -> None:
    old = Config(**_data(tmp_path))
    changes = config_changes(old, Config(**_data(tmp_path)))
    assert (changes.applied, changes.need_restart) == ((), ())
    assert changes.config == old


def test_reloadable_keys_are_applied_the_rest_named_and_kept(tmp_path: Path) -> None:
    new = _data(tmp_path)
    new["api"] = {"listen": "0.0.0.0:9000", "tokens": [{"name": "ops", "token": "second", "role": "admin"}]}
    new["log"] = {"level": "debug", "format": "console"}
    new["retention"] = {"dry_run": True, "interval": "5m"}
    new["tiers"][0]["retention"] = {"keep_last": 3, "keep_best": {"metric": "loss", "n": 1, "mode": "min"}}
    new["tiers"][1] |= {"bandwidth_limit": "100MB", "delete_delay": "2h", "concurrency": 8}
    old = Config(**_data(tmp_path))
    changes = config_changes(old, Config(**new))

    assert sorted(changes.applied) == [
        "api.tokens",
        "log.level",
        "retention.dry_run",
        "tiers.0.retention.keep_best",
        "tiers.0.retention.keep_last",
        "tiers.1.bandwidth_limit",
        "tiers.1.delete_delay",
    ]
    restart = ["api.listen", "log.format", "retention.interval", "tiers.1.concurrency"]
    assert sorted(changes.need_restart) == restart
    merged = changes.config
    assert merged.api.tokens[0].secret() == "second"
    assert (merged.log.level, merged.retention.dry_run) == ("debug", True)
    assert merged.tiers[0].retention.keep_last == 3
    assert (merged.tiers[1].bandwidth_limit, merged.tiers[1].delete_delay) == (100_000_000, 7200.0)
    # What needs a restart keeps the running value.
    assert (merged.api.listen, merged.log.format) == ("127.0.0.1:8470", "auto")
    assert merged.retention.interval == 60.0
    assert merged.tiers[1].concurrency == 4


def test_a_changed_list_of_tiers_is_a_restart_and_no_tier_key_is_applied(tmp_path: Path) -> None:
    new = _data(tmp_path)
    new["tiers"][1] |= {"name": "lustre", "retention": {"keep_last": 2}}
    new["api"]["tokens"][0]["role"] = "read"
    changes = config_changes(Config(**_data(tmp_path)), Config(**new))
    assert changes.applied == ("api.tokens",)
    assert changes.need_restart == ("tiers",)
    assert [t.name for t in changes.config.tiers] == ["nvme", "pfs"]
    assert changes.config.tiers[1].retention.keeps_everything


def test_a_token_added_is_named_once_and_never_its_secret(tmp_path: Path) -> None:
    new = _data(tmp_path)
    new["api"]["tokens"].append({"name": "job", "token": "s3cr3t", "role": "operate"})
    changes = config_changes(Config(**_data(tmp_path)), Config(**new))
    assert (changes.applied, changes.tokens) == (("api.tokens",), True)
    assert "s3cr3t" not in repr((changes.applied, changes.need_restart))


def test_prices_are_applied(tmp_path: Path) -> None:
    new = _data(tmp_path)
    new["tiers"][1] |= {"price_per_gb_month": "0.02", "price_per_1000_writes": 0.005}
    changes = config_changes(Config(**_data(tmp_path)), Config(**new))
    assert sorted(changes.applied) == ["tiers.1.price_per_1000_writes", "tiers.1.price_per_gb_month"]
    assert changes.need_restart == ()
    priced = changes.config.tiers[1]
    assert (str(priced.price_per_gb_month), str(priced.price_per_1000_writes)) == ("0.02", "0.005")
