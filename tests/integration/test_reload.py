"""SIGHUP (``systemctl reload tierd``) reloads the config file in the running daemon.

The real daemon, its config file rewritten as an operator would, then SIGHUP: the new token
answers over HTTP and the old one is refused, the retention service deletes by the new rule,
the same process runs on; a broken file is refused naming its key and the daemon keeps its
old config; a SIGHUP while the daemon starts does not end it and is applied once it is ready.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.integration.daemon_helpers import config_dict, wait_for, write_files

RUN = "demo"
MARKER = "COMPLETE"


def _config(root: Path, token: str, listen: str | None = None, **nvme: Any) -> dict[str, Any]:
    """Tier 0 ``nvme`` (``nvme`` adds to its keys) and ``pfs``; one admin token ``ops``."""
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(root / "nvme"), **nvme},
        {"name": "pfs", "kind": "posix", "path": str(root / "pfs")},
    ]
    watch = [{"path": str(root / "nvme" / RUN), "run": RUN, "format": "marker", "marker": MARKER}]
    data = config_dict(root, tiers, watch=watch)
    data["api"] = {"listen": listen or data["api"]["listen"], "tokens": [_token(token)]}
    return data


def _token(value: str) -> dict[str, str]:
    return {"name": "ops", "token": value, "role": "admin"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for tier in ("nvme", "pfs"):
        (tmp_path / tier / RUN).mkdir(parents=True)
    return tmp_path


@pytest.fixture
def daemon(root: Path) -> Iterator[Daemon]:
    """A daemon on ``_config(root, "first")``, not started."""
    made = Daemon.prepare(root, _config(root, "first"))
    yield made
    made.stop()


def _rewrite(daemon: Daemon, data: dict[str, Any]) -> None:
    """The config file replaced whole (a rename), as an editor or a config manager does."""
    new = daemon.config_path.with_suffix(".new")
    new.write_text(yaml.safe_dump(data))
    new.rename(daemon.config_path)


def _listen(daemon: Daemon) -> str:
    return str(yaml.safe_load(daemon.config_path.read_text())["api"]["listen"])


def _status(daemon: Daemon, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return http.get(f"{daemon.url}/v1/checkpoints", headers=headers, timeout=10).status_code


def _states(daemon: Daemon, token: str) -> dict[int, dict[str, str]]:
    """step -> tier -> replica state, as the API shows them."""
    answer = http.get(
        f"{daemon.url}/v1/checkpoints",
        params={"run": RUN},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return {c["step"]: {r["tier"]: r["state"] for r in c["replicas"]} for c in answer.json()["items"]}


def _hup_and_wait(daemon: Daemon, event: str) -> dict[str, Any]:
    """Send SIGHUP; the reload's outcome event (``config_reloaded`` or ``reload_refused``)."""
    before = len(daemon.logged(event))
    daemon.signal(signal.SIGHUP)
    found = wait_for(lambda: daemon.logged(event)[before:], 30, event)
    return found[0]


def test_sighup_applies_tokens_and_retention_in_the_same_process(root: Path, daemon: Daemon) -> None:
    daemon.start()
    daemon.wait_ready()
    for step in (1, 2):
        write_files(root / "nvme" / RUN / f"step{step}", {"model.bin": 4096, MARKER: 1}, seed=step)
    both = {1: {"nvme": "verified", "pfs": "verified"}, 2: {"nvme": "verified", "pfs": "verified"}}
    wait_for(lambda: _states(daemon, "first") == both, 30, "both steps copied to pfs")

    new = _config(root, "second", _listen(daemon), retention={"keep_last": 1})
    new["drain_timeout_seconds"] = 7  # needs a restart: named, not applied
    _rewrite(daemon, new)
    reloaded = _hup_and_wait(daemon, "config_reloaded")

    assert reloaded["applied"] == ["api.tokens", "tiers.0.retention.keep_last"]
    assert reloaded["need_restart"] == ["drain_timeout_seconds"]
    assert (_status(daemon, "second"), _status(daemon, "first")) == (200, 401)
    # keep_last: 1 on nvme: the older step's copy there is scheduled for deletion (delete_delay 1h).
    wait_for(lambda: _states(daemon, "second")[1]["nvme"] == "deleting", 30, "step 1 deleting on nvme")
    assert _states(daemon, "second")[2] == {"nvme": "verified", "pfs": "verified"}
    assert daemon.alive()
    assert len(daemon.logged("ready")) == 1  # the same process: it never started again


def test_a_bad_config_is_refused_and_the_old_one_stays(root: Path, daemon: Daemon) -> None:
    daemon.start()
    daemon.wait_ready()
    broken = _config(root, "second", _listen(daemon))
    broken["tiers"][1]["concurrency"] = "lots"
    _rewrite(daemon, broken)
    refused = _hup_and_wait(daemon, "reload_refused")
    assert any(p.startswith("tiers.1.") and "concurrency" in p for p in refused["problems"])

    unreadable = _config(root, "second", _listen(daemon))
    unreadable["api"]["tokens"] = [{"name": "ops", "token_file": str(root / "gone.token"), "role": "admin"}]
    _rewrite(daemon, unreadable)
    refused = _hup_and_wait(daemon, "reload_refused")
    assert refused["problems"][0].startswith("api.tokens.0.token_file: cannot read")

    assert (_status(daemon, "first"), _status(daemon, "second")) == (200, 401)
    assert daemon.alive()
    assert not daemon.logged("config_reloaded")


def test_a_sighup_while_starting_is_applied_once_ready(root: Path, daemon: Daemon) -> None:
    """The signal is sent as soon as the process handles it, which is before it is ready."""
    daemon.start()
    assert daemon.pid is not None
    _rewrite(daemon, _config(root, "second", _listen(daemon)))
    wait_for(lambda: _catches_sighup(daemon.pid), 30, "the daemon to handle SIGHUP", interval=0.001)
    daemon.signal(signal.SIGHUP)
    daemon.wait_ready()
    wait_for(lambda: daemon.logged("config_reloaded"), 30, "the kept reload")
    assert (_status(daemon, "second"), _status(daemon, "first")) == (200, 401)
    assert daemon.alive()


def _catches_sighup(pid: int | None) -> bool:
    """Whether ``pid`` has a handler for SIGHUP (its ``SigCgt`` mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGHUP - 1)))


def test_sighups_while_stopping_are_ignored(root: Path, daemon: Daemon) -> None:
    """SIGHUPs every millisecond from SIGTERM to the exit: the drain ends in exit 0, not a kill."""
    daemon.start()
    daemon.wait_ready()
    daemon.signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while daemon.poll() is None and time.monotonic() < deadline:
        daemon.signal(signal.SIGHUP)
        time.sleep(0.001)
    assert daemon.wait(30) == 0
