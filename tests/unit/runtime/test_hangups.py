"""SIGHUP over the process's life: kept until the daemon is ready, delivered, then ignored."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tierd.daemon.hangups import HangUps


@pytest.fixture(autouse=True)
def _restore_sighup() -> Iterator[None]:
    before = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, before)


def test_a_sighup_before_ready_is_kept_and_delivered_once() -> None:
    hangups = HangUps()
    os.kill(os.getpid(), signal.SIGHUP)  # the handler runs before kill returns (main thread)
    calls: list[str] = []
    hangups.deliver_to(lambda: calls.append("reload"))
    assert calls == ["reload"]
    os.kill(os.getpid(), signal.SIGHUP)
    assert calls == ["reload", "reload"]


def test_nothing_is_delivered_without_a_sighup() -> None:
    calls: list[str] = []
    HangUps().deliver_to(lambda: calls.append("reload"))
    assert calls == []


def test_ignored_once_the_daemon_stops() -> None:
    hangups = HangUps()
    calls: list[str] = []
    hangups.deliver_to(lambda: calls.append("reload"))
    hangups.ignore()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGHUP)
    assert calls == []
