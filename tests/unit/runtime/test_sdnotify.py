"""systemd notify without libsystemd: path and abstract sockets, watchdog interval."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from tierd.daemon import sdnotify


def test_no_socket_means_no_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.notify("READY=1") is False


def test_path_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "n.sock"))
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "n.sock"))
        assert sdnotify.notify("READY=1")
        assert sock.recv(100) == b"READY=1"


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"tierd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sdnotify.notify("STOPPING=1")
        assert sock.recv(100) == b"STOPPING=1"


def test_unreachable_socket_is_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone.sock"))
    assert sdnotify.notify("READY=1") is False


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        (None, None, None),
        ("0", None, None),
        ("2000000", None, 1.0),
        ("2000000", "1", None),
        ("x", None, None),
    ],
)
def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch, usec, pid, expected) -> None:
    for key, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    assert sdnotify.watchdog_interval() == expected


def test_watchdog_pid_of_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert sdnotify.watchdog_interval() == 0.5
