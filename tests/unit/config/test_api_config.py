"""``api``: no anonymous admin on an address other nodes reach, and ``api.tls``'s files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from tierd.cli.main import EXIT_CONFIG, main
from tierd.config import load_config
from tierd.daemon.runtime import _warn_if_anonymous
from tierd.errors import ConfigError

TOKEN = {"name": "ops", "token": "t", "role": "admin"}


def _write(tmp_path: Path, api: dict[str, Any]) -> Path:
    data = {"api": api, "tiers": [{"name": "nvme", "kind": "posix", "path": "ckpt"}]}
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "listen", ["0.0.0.0:8470", "[::]:8470", "10.1.2.3:8470", "node7.cluster:8470", "[fe80::1]:8470"]
)
def test_no_tokens_on_an_address_others_reach_is_refused(tmp_path: Path, listen: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(_write(tmp_path, {"listen": listen}))
    message = str(refused.value)
    assert f"api.tokens: empty, and api.listen ({listen}) is not a loopback address" in message
    assert "api.allow_anonymous: true" in message


@pytest.mark.parametrize(
    "listen", ["127.0.0.1:8470", "127.8.9.10:0", "[::1]:8470", "localhost:8470", "[::ffff:127.0.0.1]:8470"]
)
def test_no_tokens_on_loopback_is_allowed(tmp_path: Path, listen: str) -> None:
    assert load_config(_write(tmp_path, {"listen": listen})).api.tokens == []


@pytest.mark.parametrize(
    "api",
    [
        {"listen": "0.0.0.0:8470", "tokens": [TOKEN]},
        {"listen": "0.0.0.0:8470", "allow_anonymous": True},
    ],
)
def test_tokens_or_an_explicit_allow_anonymous_admit_any_address(tmp_path: Path, api: dict[str, Any]) -> None:
    assert load_config(_write(tmp_path, api)).api.listen == "0.0.0.0:8470"


def test_the_environment_can_open_and_allow_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, {"listen": "127.0.0.1:8470"})
    monkeypatch.setenv("TIERD_API__LISTEN", "0.0.0.0:8470")
    with pytest.raises(ConfigError, match=r"api\.tokens: empty"):
        load_config(path)
    monkeypatch.setenv("TIERD_API__ALLOW_ANONYMOUS", "true")
    assert load_config(path).api.allow_anonymous


def test_an_allowed_anonymous_api_warns_at_start(tmp_path: Path) -> None:
    anonymous = load_config(_write(tmp_path, {"listen": "0.0.0.0:8470", "allow_anonymous": True}))
    loopback = load_config(_write(tmp_path, {"listen": "127.0.0.1:8470", "allow_anonymous": True}))
    with capture_logs() as logs:
        _warn_if_anonymous(loopback)
        _warn_if_anonymous(anonymous)
    assert [(e["event"], e["log_level"], e["listen"]) for e in logs] == [
        ("api_anonymous", "warning", "0.0.0.0:8470")
    ]


def test_tls_files_are_relative_to_the_config_file(tmp_path: Path) -> None:
    tls = {"cert_file": "tls/cert.pem", "key_file": "/etc/tierd/key.pem", "client_ca_file": "ca.pem"}
    config = load_config(_write(tmp_path, {"tls": tls}))
    assert config.api.tls is not None
    assert config.api.tls.cert_file == tmp_path / "tls" / "cert.pem"
    assert config.api.tls.key_file == Path("/etc/tierd/key.pem")
    assert config.api.tls.client_ca_file == tmp_path / "ca.pem"


@pytest.mark.parametrize(
    ("tls", "key"),
    [({"cert_file": "c.pem"}, "api.tls.key_file: required key is missing"), ({"cert": "c"}, "api.tls.cert")],
)
def test_a_malformed_tls_block_names_its_key(tmp_path: Path, tls: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(_write(tmp_path, {"tls": tls}))


def test_config_validate_reads_the_tls_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, {"tls": {"cert_file": "missing.pem", "key_file": "key.pem"}})
    assert main(["config", "validate", str(path)]) == EXIT_CONFIG
    assert f"api.tls.cert_file: cannot read {tmp_path / 'missing.pem'}" in capsys.readouterr().err
