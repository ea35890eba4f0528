"""The whole daemon over a watched root full of hostile entries.

Real DCP steps (torch's own writer), one clean and the others each holding a symlink to
a secret outside the tiers, a FIFO with no writer, a socket, a hard link to the secret,
a newline or an undecodable byte in a name; beside them, a Lightning-style ``last``
symlink and a symlink that looks like a step but leads to a committed DCP step outside.
The clean step reaches the next tier; every other one is refused, visibly in
``GET /v1/audit``, and a notify of one answers 422. The secret is never opened (inotify
on its inode, from this process), its bytes are nowhere on the next tier nor in the log,
no one waits on the FIFO, and the daemon stops cleanly. A step nested deeper than PATH_MAX,
there from the start, fails alone: a step written afterwards still reaches the next tier.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.opens import OpenSpy
from tests.integration.daemon_helpers import config_dict, wait_for
from tests.unit.detect.helpers import deep_chain
from tests.unit.detect.layouts import LAYOUTS, write_torch

pytestmark = pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="inotify and O_PATH are Linux's")

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
SECRET = b"root:$6$hostile-test-secret$:19000:0:99999:7:::\n"
#: step -> (what is planted in it, the kind its refusal names)
HOSTILE = {
    2: ("symlink", "symlink"),
    3: ("fifo", "FIFO"),
    4: ("socket", "socket"),
    5: ("hard link", "hard link (2 links)"),
    6: ("newline", "name holds a control character"),
    7: ("bad utf-8", "name is not valid UTF-8"),
}


def _plant(how: str, ckpt: Path, outside: Path) -> None:
    if how == "symlink":
        (ckpt / "__1_0.distcp").symlink_to(outside / "shadow")
    elif how == "fifo":
        os.mkfifo(ckpt / "pipe")
    elif how == "socket":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(str(ckpt / "s"))
    elif how == "hard link":
        os.link(outside / "shadow", ckpt / "__1_0.distcp")
    elif how == "newline":
        (ckpt / "evil\nname").write_bytes(b"n" * 64)
    else:
        with open(os.fsencode(ckpt) + b"/evil\xfe", "wb") as f:
            f.write(b"u" * 64)


def _layout(watched: Path, outside: Path) -> None:
    for step in (1, *HOSTILE):
        DCP.uncommitted(watched, step)
        DCP.commit(watched, step)
    for step, (how, _) in HOSTILE.items():
        _plant(how, watched / f"step_{step}", outside)
    DCP.uncommitted(outside, 9)  # a committed step outside, reachable only through a symlink
    DCP.commit(outside, 9)
    (watched / "step_9").symlink_to(outside / "step_9")
    (watched / "last").symlink_to("step_1")


def _refusals(base: str) -> list[dict[str, Any]]:
    items = http.get(f"{base}/v1/audit", params={"limit": 1000}, timeout=10).json()["items"]
    return [i for i in items if i["action"] == "refused"]


def _all_refused(base: str) -> list[dict[str, Any]] | None:
    refused = _refusals(base)
    return refused if len(refused) == len(HOSTILE) else None


def _verified(base: str) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = http.get(f"{base}/v1/checkpoints", timeout=10).json()["items"]
    done = [i for i in items if all(r["state"] == "verified" for r in i["replicas"])]
    return items if done else None


@pytest.mark.slow
def test_daemon_refuses_hostile_checkpoints_and_reads_nothing_outside(tmp_path: Path) -> None:
    for name in ("nvme", "pfs", "etc"):
        (tmp_path / name).mkdir()
    outside = tmp_path / "etc"
    (outside / "shadow").write_bytes(SECRET)
    watched = tmp_path / "nvme" / "demo"
    _layout(watched, outside)
    spy = OpenSpy(outside / "shadow", *sorted((outside / "step_9").iterdir()))
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
    ]
    watch = [{"path": str(watched), "run": "demo"}]
    data = config_dict(tmp_path, tiers, watch=watch, reconcile_interval_seconds=1)
    daemon = Daemon.prepare(tmp_path, data)
    base = daemon.url
    try:
        daemon.start()
        daemon.wait_ready(30)
        items = wait_for(lambda: _verified(base), 60, "the clean step on pfs", interval=0.2)
        refused = wait_for(lambda: _all_refused(base), 60, "every refusal", interval=0.2)
        answer = http.post(f"{base}/v1/checkpoints", json={"run": "x", "step": 2, "path": "demo/step_2"})
        through = http.post(f"{base}/v1/checkpoints", json={"run": "x", "step": 9, "path": "demo/step_9"})
        assert daemon.terminate(30) == 0
    finally:
        daemon.stop()
        opened = spy.opened()
        spy.close()
    assert opened == set()
    assert [(i["run"], i["step"]) for i in items] == [("demo", 1)]
    by_step = {r["detail"]["step"]: r for r in refused if r["actor"] == "detector:dcp"}
    assert sorted(by_step) == sorted(HOSTILE)
    for step, (_, kind) in HOSTILE.items():
        assert [o["kind"] for o in by_step[step]["detail"]["offending"]] == [kind]
        assert by_step[step]["checkpoint_id"] is None
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "demo/step_2/__1_0.distcp (symlink)" in answer.json()["detail"]
    assert through.status_code == 422
    assert "is a symlink: tierd follows none" in through.json()["detail"]  # to /etc: never looked at
    with pytest.raises(OSError, match="No such device"):  # ENXIO: no reader is waiting on it
        os.open(watched / "step_3" / "pipe", os.O_WRONLY | os.O_NONBLOCK)
    for path in (tmp_path / "pfs").rglob("*"):
        assert not path.is_file() or SECRET not in path.read_bytes()
    assert sorted(p.name for p in (tmp_path / "pfs" / "demo").iterdir()) == ["step_1"]
    assert SECRET not in daemon.log_path.read_bytes()
    warned = [e for e in daemon.events() if e.get("event") == "checkpoint_refused"]
    assert sorted(e["step"] for e in warned) == sorted(HOSTILE)  # once each, over several reconciles


def _warned(daemon: Daemon, event: str) -> list[dict[str, Any]]:
    return [e for e in daemon.events() if e.get("event") == event]


@pytest.mark.slow
def test_a_step_deeper_than_path_max_stops_no_other_step(tmp_path: Path) -> None:
    """Issue 23, item 7: one tree deeper than PATH_MAX stopped every reconcile and every event."""
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
    watched = tmp_path / "nvme" / "demo"
    DCP.uncommitted(watched, 1)
    DCP.commit(watched, 1)
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
    ]
    watch = [{"path": str(watched), "run": "demo"}]
    data = config_dict(tmp_path, tiers, watch=watch, reconcile_interval_seconds=1)
    daemon = Daemon.prepare(tmp_path, data)
    base = daemon.url
    with deep_chain(watched / "step_1"):
        try:
            daemon.start()
            daemon.wait_ready(30)
            written = write_torch(watched / "model_step2.pt.tmp")  # torch.save, renamed into place
            written.rename(watched / "model_step2.pt")
            items = wait_for(lambda: _verified(base), 60, "step 2 on pfs", interval=0.2)
            failed = [e["event"] for e in daemon.events() if e.get("event", "").endswith("_failed")]
            assert daemon.terminate(30) == 0
        finally:
            daemon.stop()
    assert [(i["run"], i["step"], i["format"]) for i in items] == [("demo", 2, "torch_save")]
    assert failed == []  # no pass, no look at an event's directory, ended in a traceback
    assert sorted(p.name for p in (tmp_path / "pfs" / "demo").iterdir()) == ["model_step2.pt"]
    (warned,) = _warned(daemon, "checkpoint_unreadable")  # once, over many reconciles and events
    assert (warned["path"], warned["format"]) == ("step_1", "dcp")
    assert "ENAMETOOLONG" in warned["reason"]
