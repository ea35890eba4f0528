"""Where the CLI finds the daemon (``--url``, ``$TIERD_URL``, the config) and its token
(``--token``, ``--token-file``, ``$TIERD_TOKEN``), and the token files it refuses."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tierd.cli.connection import daemon_url, token, token_file
from tierd.cli.main import main
from tierd.errors import ConfigError
from tierd.keyring import MAX_TOKEN_FILE_BYTES

SECRET = "s3cr3t-t0ken"


def _file(tmp_path: Path, data: bytes, mode: int = 0o600) -> str:
    path = tmp_path / "token"
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def _refusal(path: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        token_file(path)
    return str(refused.value)


def test_a_token_file_is_read_and_stripped(tmp_path: Path) -> None:
    assert token_file(_file(tmp_path, f"  {SECRET}\n".encode())) == SECRET
    assert token_file(_file(tmp_path, SECRET.encode(), mode=0o640)) == SECRET  # the group may read it


@pytest.mark.parametrize(
    ("data", "mode", "says"),
    [
        (SECRET.encode(), 0o644, "every user may read it (mode 644); chmod o-r"),
        (SECRET.encode(), 0o604, "every user may read it (mode 604)"),
        (b"", 0o600, "is empty"),
        (b" \n\t\n", 0o600, "is empty"),
        (b"two\nlines", 0o600, "holds a space, a line break"),
        (b"sp ace", 0o600, "holds a space"),
        (b"esc\x1b[31m", 0o600, "a control"),
        ("caf\u00e9".encode(), 0o600, "non-ASCII"),
        (b"\xff\xfe", 0o600, "non-ASCII"),
        (b"x" * (MAX_TOKEN_FILE_BYTES + 1), 0o600, f"larger than {MAX_TOKEN_FILE_BYTES} bytes"),
    ],
)
def test_a_token_file_is_refused_naming_it_never_showing_it(
    tmp_path: Path, data: bytes, mode: int, says: str
) -> None:
    path = _file(tmp_path, data, mode)
    message = _refusal(path)
    assert message.startswith(f"{path}: ")
    assert says in message
    assert SECRET not in message


def test_a_token_file_that_cannot_be_read(tmp_path: Path) -> None:
    assert (
        _refusal(str(tmp_path / "missing"))
        == f"{tmp_path / 'missing'}: cannot read: No such file or directory"
    )
    assert _refusal(str(tmp_path)).endswith("cannot read: Is a directory")


def test_a_token_from_a_pipe_is_read(tmp_path: Path) -> None:
    """``--token-file <(vault read ...)``: the shell hands over a pipe (mode 600) by its /dev/fd name."""
    read, write = os.pipe()
    os.write(write, f"{SECRET}\n".encode())
    os.close(write)
    try:
        assert token_file(f"/dev/fd/{read}") == SECRET
    finally:
        os.close(read)


def _args(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**({"url": None, "config": None, "token": None, "token_file": None} | given))


def test_the_token_flag_then_the_file_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERD_TOKEN", "from-env")
    assert token(_args(token="flag", token_file=None)) == "flag"
    assert token(_args(token_file="file")) == "file"
    assert token(_args()) == "from-env"
    monkeypatch.setenv("TIERD_TOKEN", "")
    assert token(_args()) is None


def test_the_url_flag_then_the_environment_then_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tierd.yaml"
    config.write_text(
        "catalog: {url: 'sqlite:///c.db'}\napi: {listen: '0.0.0.0:9001', allow_anonymous: true}\n"
        "tiers: [{name: t, kind: posix, path: t}]\n"
    )
    monkeypatch.setenv("TIERD_CONFIG", str(config))
    monkeypatch.setenv("TIERD_URL", "http://from-env:1")
    assert daemon_url(_args(url="http://flag:2")) == "http://flag:2"
    assert daemon_url(_args()) == "http://from-env:1"
    monkeypatch.setenv("TIERD_URL", "")
    assert daemon_url(_args()) == "http://127.0.0.1:9001"  # the wildcard host as loopback


def test_no_url_and_no_config_names_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERD_URL", raising=False)
    monkeypatch.setenv("TIERD_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError) as refused:
        daemon_url(_args())
    assert refused.value.problems == [
        f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory",
        "(or name the daemon's API with --url or $TIERD_URL)",
    ]


def test_a_token_and_a_token_file_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, SECRET.encode())
    with pytest.raises(SystemExit) as exited:
        main(["ls", "--token-file", path, "--token", "other", "--url", "http://127.0.0.1:9"])
    assert exited.value.code == 2
    assert "argument --token: not allowed with argument --token-file" in capsys.readouterr().err
