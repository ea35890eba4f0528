"""The ``tierd`` command as an operator runs it against the real daemon.

``$TIERD_URL`` with no config file on the machine (``--url`` still first), a token from
``--token-file`` (one every user may read refused without a request and without the token
shown), and the daemon's own log on a terminal (a pty): coloured, but not with ``$NO_COLOR``
or ``--no-color``. Each ``tierd`` is a process forked from the zygote (``run_cli``). The URL
and token tests share one daemon (a module fixture); the colour test starts its own three
times, each run forked from the zygote (~1 s each on an idle machine).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, run_cli
from tests.integration.daemon_helpers import config_dict

pytestmark = pytest.mark.xdist_group("cli_daemon")

SECRET = "ops-s3cret"


def _config(root: Path, **overrides: Any) -> dict[str, Any]:
    tiers = []
    for name in ("nvme", "pfs"):
        (root / name).mkdir()
        tiers.append({"name": name, "kind": "posix", "path": str(root / name)})
    return config_dict(root, tiers, **overrides)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon whose API wants a ``read`` token."""
    root = tmp_path_factory.mktemp("cli-daemon")
    data = _config(root)
    data["api"]["tokens"] = [{"name": "ops", "role": "read", "token": SECRET}]
    daemon = Daemon.prepare(root, data)
    daemon.start()
    try:
        daemon.wait_ready()
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An operator's shell: no config file where the CLI looks, no URL or token in the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIERD_CONFIG", str(tmp_path / "no-config.yaml"))
    for name in ("TIERD_URL", "TIERD_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _tierd(where: Path, *argv: str) -> tuple[int, str]:
    return run_cli(list(argv), where / "cli.log")


def test_tierd_url_without_a_config_file(
    daemon: Daemon, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = _tierd(elsewhere, "ls", "--token", SECRET)
    assert code == 78, out
    assert f"{elsewhere / 'no-config.yaml'}: cannot read" in out
    assert "--url or $TIERD_URL" in out

    monkeypatch.setenv("TIERD_URL", daemon.url)
    code, out = _tierd(elsewhere, "ls", "--token", SECRET)
    assert (code, out.splitlines()[0].split()) == (
        0,
        ["ID", "RUN", "STEP", "STATE", "SIZE", "PROTECTION", "REPLICAS"],
    )

    monkeypatch.setenv("TIERD_URL", "http://127.0.0.1:9")  # nothing listens there: --url comes first
    assert _tierd(elsewhere, "status", "--url", daemon.url, "--token", SECRET) == (
        0,
        "ready (node testnode)\n",
    )


def test_a_token_from_a_file(daemon: Daemon, elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERD_URL", daemon.url)
    token = elsewhere / "token"
    token.write_text(f"{SECRET}\n")
    token.chmod(0o600)
    code, out = _tierd(elsewhere, "runs", "--token-file", str(token))
    assert (code, out) == (0, "RUN  CHECKPOINTS  NEWEST  NEWEST VERIFIED PER TIER\n")

    token.chmod(0o644)
    code, out = _tierd(elsewhere, "runs", "--token-file", str(token))
    assert code == 2
    refusal = f"argument --token-file: {token}: every user may read it (mode 644); chmod o-r {token}"
    assert out.splitlines()[-1] == f"tierd runs: error: {refusal}"
    assert SECRET not in out


class Terminal:
    """A pseudo-terminal the daemon writes its log to, read as it comes."""

    def __init__(self) -> None:
        self._leader, self._follower = os.openpty()
        self.path = Path(os.ttyname(self._follower))
        self.shown = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._leader, 65536)
            except OSError:  # EIO: nobody holds the terminal any more
                return
            if not chunk:
                return
            self.shown += chunk

    def wait_for(self, pattern: bytes, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while re.search(pattern, self.shown) is None:
            assert time.monotonic() < deadline, f"{pattern!r} never shown:\n{self.shown[-4000:]!r}"
            time.sleep(0.05)

    def close(self) -> None:
        os.close(self._follower)
        self._reader.join(10)
        os.close(self._leader)


def _shown(root: Path, env: dict[str, str], options: tuple[str, ...] = ()) -> bytes:
    """What ``tierd run`` shows on a terminal up to its ``ready`` line."""
    data = _config(root, log={"level": "info", "format": "auto"})
    daemon = Daemon.prepare(root, data, env={"TERM": "xterm-256color", **env}, options=options)
    terminal = Terminal()
    daemon.log_path = terminal.path
    try:
        daemon.start()
        daemon.wait_ready()
        terminal.wait_for(rb"ready\s.*tierd\.daemon\.runtime")
    finally:
        daemon.stop()
        terminal.close()
    return terminal.shown


def test_the_daemon_on_a_terminal_is_coloured_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    for run in ("plain", "no-color-env", "no-color-flag"):
        (tmp_path / run).mkdir()
    assert b"\x1b[" in _shown(tmp_path / "plain", {})
    assert b"\x1b" not in _shown(tmp_path / "no-color-env", {"NO_COLOR": "1"})
    assert b"\x1b" not in _shown(tmp_path / "no-color-flag", {}, ("--no-color",))
