"""The client's TLS settings: a CA or client certificate that cannot be used names where it came from."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tierd.client import Client, tls_context
from tierd.client.wire import connection_error
from tierd.errors import ConfigError, Unreachable


def test_a_missing_ca_file_names_the_argument_or_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"ca_file: cannot use .*none\.pem: No such file"):
        Client("https://127.0.0.1:1", ca_file=tmp_path / "none.pem")
    monkeypatch.setenv("TIERD_CA_FILE", str(tmp_path / "gone.pem"))
    with pytest.raises(ConfigError, match=r"\$TIERD_CA_FILE: cannot use .*gone\.pem"):
        tls_context()
    monkeypatch.delenv("TIERD_CA_FILE")
    monkeypatch.setenv("TIERD_CLIENT_CERT", str(tmp_path / "me.pem"))
    with pytest.raises(ConfigError, match=r"\$TIERD_CLIENT_CERT: cannot use .*me\.pem"):
        tls_context()


def test_ca_file_and_verify_are_one_choice(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        Client("https://127.0.0.1:1", ca_file=tmp_path / "ca.pem", verify=False)


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("http://127.0.0.1:1", "does it serve HTTPS? then use an https:// URL"),
        ("https://127.0.0.1:1", "does it require a client certificate? give one in $TIERD_CLIENT_CERT"),
    ],
)
def test_a_connection_closed_at_once_says_what_may_be_wrong(url: str, hint: str) -> None:
    closed = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    error = connection_error(httpx.URL(url), closed)
    assert isinstance(error, Unreachable)
    assert str(error).endswith(f"({hint})")
