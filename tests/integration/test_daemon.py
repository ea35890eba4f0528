"""The daemon as a real subprocess: readiness, systemd notify, SIGTERM, refusals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import posix_config_dict
from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.integration.daemon_helpers import wait_for


def _tierd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierd", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    data = posix_config_dict(tmp_path, api={"listen": f"127.0.0.1:{free_port()}"}, drain_timeout_seconds=5)
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(30)
    yield sock
    sock.close()


def _messages_until(sock: socket.socket, wanted: str) -> list[str]:
    seen: list[str] = []
    while not any(wanted in m for m in seen):
        seen.append(sock.recv(4096).decode())
    return seen


def _port(config_file: Path) -> int:
    return int(yaml.safe_load(config_file.read_text())["api"]["listen"].rsplit(":", 1)[1])


def test_ready_notify_and_sigterm(config_file: Path, notify_socket: socket.socket, tmp_path: Path) -> None:
    assert _tierd("db", "upgrade", "--config", str(config_file)).returncode == 0
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "400000"}
    daemon = Daemon(config_file, tmp_path / "daemon.log", exec=True, env=env)  # the entry point itself
    daemon.start()
    try:
        messages = _messages_until(notify_socket, "READY=1")
        base = f"http://127.0.0.1:{_port(config_file)}"
        assert http.get(f"{base}/readyz").json()["status"] == "ready"
        assert http.get(f"{base}/livez").json()["status"] == "ok"
        assert http.get(f"{base}/v1/checkpoints").json()["items"] == []
        messages += _messages_until(notify_socket, "WATCHDOG=1")
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        messages += _messages_until(notify_socket, "STOPPING=1")
        assert daemon.wait(15) == 0
        assert time.monotonic() - started < 5 + 5  # the drain bound, plus interpreter exit
    finally:
        daemon.stop()
    assert any(m.startswith("READY=1") for m in messages)
    assert '"event": "stopped"' in daemon.log_path.read_text()


def test_run_refuses_an_unmigrated_catalog(config_file: Path) -> None:
    result = _tierd("run", "--config", str(config_file))
    assert result.returncode != 0
    assert "tierd db upgrade" in result.stderr


def test_run_refuses_an_invalid_config_naming_the_key(tmp_path: Path) -> None:
    data = posix_config_dict(tmp_path)
    data["tiers"][1]["concurrency"] = "lots"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = _tierd("run", "--config", str(path))
    assert result.returncode == 78
    assert "tiers.1.posix.concurrency" in result.stderr


def test_sigint_also_stops_cleanly(config_file: Path, notify_socket: socket.socket, tmp_path: Path) -> None:
    assert _tierd("db", "upgrade", "--config", str(config_file)).returncode == 0
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
    daemon = Daemon(config_file, tmp_path / "daemon.log", exec=True, env=env)
    daemon.start()
    try:
        _messages_until(notify_socket, "READY=1")
        daemon.signal(signal.SIGINT)
        assert daemon.wait(15) == 0
    finally:
        daemon.stop()


def test_sighup_reads_the_token_files_again(tmp_path: Path) -> None:
    """Rotating a token needs no restart; a file gone at the reload keeps its token (logged)."""
    token_file = tmp_path / "ops.token"
    token_file.write_text("first\n")
    token_file.chmod(0o600)
    port = free_port()
    tokens = [{"name": "ops", "token_file": str(token_file), "role": "admin"}]
    data = posix_config_dict(
        tmp_path, api={"listen": f"127.0.0.1:{port}", "tokens": tokens}, log={"format": "json"}
    )
    daemon = Daemon.prepare(tmp_path, data)
    daemon.start()

    def status(token: str) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        return http.get(f"http://127.0.0.1:{port}/v1/checkpoints", headers=headers).status_code

    def reloads() -> list[dict[str, object]]:
        return [e for e in daemon.events() if e["event"] == "tokens_reloaded"]

    try:
        wait_for(lambda: any(e["event"] == "ready" for e in daemon.events()), 30, "the daemon to be ready")
        token_file.unlink()
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: len(reloads()) == 1, 30, "the first reload")
        unreadable = [e for e in daemon.events() if e["event"] == "token_file_unreadable"]
        assert [e["token"] for e in unreadable] == ["ops"]
        assert (status("first"), status("second")) == (200, 401)

        token_file.write_text("second\n")
        token_file.chmod(0o644)  # every user could read it: refused, the old token stays
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: len(reloads()) == 2, 30, "the second reload")
        unreadable = [e for e in daemon.events() if e["event"] == "token_file_unreadable"]
        assert "every user may read it (mode 644)" in str(unreadable[-1]["error"])
        assert (status("first"), status("second")) == (200, 401)

        token_file.chmod(0o600)
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: len(reloads()) == 3, 30, "the third reload")
        assert (status("first"), status("second")) == (401, 200)
        assert daemon.alive()
    finally:
        daemon.stop()


def test_run_refuses_a_token_file_it_cannot_read_naming_the_key(tmp_path: Path) -> None:
    tokens = [{"name": "ops", "token_file": str(tmp_path / "missing.token"), "role": "admin"}]
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(posix_config_dict(tmp_path, api={"tokens": tokens})))
    for command in (["config", "validate", str(path)], ["run", "--config", str(path)]):
        result = _tierd(*command)
        assert result.returncode == 78, result.stderr
        assert "api.tokens.0.token_file: cannot read" in result.stderr


def test_run_refuses_a_token_file_every_user_may_read(tmp_path: Path) -> None:
    """A token any local user can read is no secret: exit 78 naming the key, never the token."""
    token_file = tmp_path / "ops.token"
    token_file.write_text("hunter2-token\n")
    token_file.chmod(0o644)
    tokens = [{"name": "ops", "token_file": str(token_file), "role": "admin"}]
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(posix_config_dict(tmp_path, api={"tokens": tokens})))
    for command in (["config", "validate", str(path)], ["run", "--config", str(path)]):
        result = _tierd(*command)
        assert result.returncode == 78, result.stderr
        assert "api.tokens.0.token_file: every user may read it (mode 644)" in result.stderr
        assert "hunter2" not in result.stderr + result.stdout
