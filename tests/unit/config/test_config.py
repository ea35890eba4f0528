"""Config loading: the example is valid, errors name their key, the environment wins."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tierd.cli.main import EXIT_CONFIG, main
from tierd.config import PosixTier, S3Tier, load_config
from tierd.errors import ConfigError
from tierd.keyring import Keyring

REPO = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _base() -> dict[str, object]:
    return {
        "watch": [{"path": "ckpt/demo", "run": "demo"}],
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": "ckpt"},
            {"name": "object", "kind": "s3", "bucket": "ckpt", "prefix": "runs"},
        ],
    }


def test_example_config_is_valid_and_paths_resolve_against_its_directory() -> None:
    config = load_config(REPO / "config.example.yaml")
    assert [t.name for t in config.tiers] == ["nvme", "pfs", "object", "replica"]
    assert config.tier0.path == REPO / "var" / "nvme" / "checkpoints"
    assert config.catalog.url == f"sqlite:///{REPO / 'var' / 'catalog.db'}"
    assert config.api.host == "127.0.0.1"
    assert config.api.port == 8470


def test_defaults_and_normalisation(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, _base()))
    s3 = config.tiers[1]
    assert isinstance(s3, S3Tier)
    assert s3.prefix == "runs/"
    assert isinstance(config.tiers[0], PosixTier)
    assert config.drain_timeout_seconds == 30
    assert config.watch[0].path == tmp_path / "ckpt" / "demo"


@pytest.mark.parametrize(
    ("mutate", "key", "reason"),
    [
        (lambda d: d["tiers"][1].update(kind="ftp"), "tiers.1", "kind"),
        (lambda d: d["tiers"][1].pop("bucket"), "tiers.1.s3.bucket", "required key is missing"),
        (lambda d: d.update(api={"listen": "nowhere"}), "api.listen", "HOST:PORT"),
        (lambda d: d.update(drain_timeout_seconds=-1), "drain_timeout_seconds", "greater than or equal"),
        (lambda d: d.update(catalog={"url": "mysql://x"}), "catalog.url", "sqlite://"),
        (lambda d: d.update(colour="blue"), "colour", "unknown key"),
        (lambda d: d["tiers"][0].update(concurrency=0), "tiers.0.posix.concurrency", "greater than"),
        (lambda d: d["watch"][0].pop("run"), "watch.0", "exactly one of run or run_pattern"),
        (lambda d: d["watch"][0].update(run_pattern="(", run=None), "watch.0", "regular expression"),
        (lambda d: d["tiers"][1].update(name="nvme"), "tiers", "duplicate tier names"),
        (lambda d: d["tiers"].reverse(), "tiers.0", "must be kind: posix"),
        (lambda d: d["watch"][0].update(path="/elsewhere"), "watch.0.path", "not inside tier 0"),
        (  # 512 two-byte characters and the "/" added: no key S3 takes can start with it
            lambda d: d["tiers"][1].update(prefix="é" * 512),
            "tiers.1.s3.prefix",
            "is 1,025 bytes in UTF-8: an S3 key",
        ),
        (
            lambda d: d.update(api={"tokens": [{"name": "x", "role": "god", "token": "t"}]}),
            "api.tokens.0.role",
            "",
        ),
        (
            lambda d: d.update(api={"tokens": [{"name": "ops\x1b[2J", "role": "read", "token": "t"}]}),
            "api.tokens.0.name",
            "must be printable",
        ),
    ],
)
def test_errors_name_the_key_and_the_reason(tmp_path: Path, mutate, key: str, reason: str) -> None:
    data = _base()
    mutate(data)
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, data))
    message = str(info.value)
    assert key in message
    assert reason in message


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tiers: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def test_environment_overrides_win_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _base()
    data["api"] = {
        "listen": "127.0.0.1:9000",
        "tokens": [{"name": "ops", "token": "s3cret", "role": "admin"}],
    }
    path = _write(tmp_path, data)
    monkeypatch.setenv("TIERD_API__LISTEN", "127.0.0.1:9100")
    monkeypatch.setenv("TIERD_DRAIN_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("TIERD_CATALOG__URL", "sqlite:///state/cat.db")
    config = load_config(path)
    assert config.api.port == 9100
    assert config.api.tokens[0].secret() == "s3cret"  # nested keys merge, not replace
    assert config.drain_timeout_seconds == 7
    assert config.catalog.url == f"sqlite:///{tmp_path / 'state' / 'cat.db'}"


def test_bad_environment_override_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERD_DRAIN_TIMEOUT_SECONDS", "soon")
    with pytest.raises(ConfigError, match="drain_timeout_seconds"):
        load_config(_write(tmp_path, _base()))


def test_token_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "ops.token").write_text("from-file\n")
    (tmp_path / "ops.token").chmod(0o600)
    data = _base()
    data["api"] = {"tokens": [{"name": "ops", "token_file": str(tmp_path / "ops.token"), "role": "read"}]}
    keyring = Keyring(load_config(_write(tmp_path, data)).api.tokens)
    found = keyring.find("from-file")
    assert found is not None
    assert found.name == "ops"


def test_cli_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path, _base())
    assert main(["config", "validate", str(good)]) == 0
    assert "valid (2 tiers, 1 watched roots)" in capsys.readouterr().out
    data = _base()
    data["api"] = {"listen": "nope"}
    bad = _write(tmp_path, data)
    assert main(["config", "validate", str(bad)]) == EXIT_CONFIG
    assert "api.listen" in capsys.readouterr().err


def test_cli_uses_tierd_config_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERD_CONFIG", str(_write(tmp_path, _base())))
    assert main(["config", "validate"]) == 0
