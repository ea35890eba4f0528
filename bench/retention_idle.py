"""The real daemon idling on a big catalog: its CPU time over a window, from /proc/<pid>/stat.

The daemon (``python -m tierd run --config F``) starts on a catalog where every replica is
settled (verified, or ``deleting`` with its delay still to run), so the pipeline has nothing
to copy and retention nothing due. After its ``ready`` log line and a settle time (start-up
reads the whole catalog: the scheduler's first pass, retention's first pass, detection's
first reconcile), its CPU time (utime + stime of every thread) is read at both ends of the
window.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.common import REPO, stop_process, vm_hwm_bytes
from tests.fixtures.net import free_port
from tests.fixtures.s3servers import die_with_parent

__all__ = ["IdleResult", "daemon_cpu", "measure_idle"]

NODE = "bench"


@dataclass(frozen=True)
class IdleResult:
    """CPU used by the daemon over ``window`` seconds of wall time."""

    window: float
    user: float
    system: float
    peak_rss_bytes: int
    settle: float
    warnings: list[str]

    @property
    def cpu(self) -> float:
        """User plus system seconds."""
        return self.user + self.system

    @property
    def share(self) -> float:
        """The fraction of one core used."""
        return self.cpu / self.window


def daemon_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a live process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _env() -> dict[str, str]:
    """This environment minus ``TIERD_*`` overrides that would change the daemon's config."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TIERD_")}


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while b'"ready"' not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the daemon did not become ready; its log:\n{tail}")
        time.sleep(0.2)


def _noteworthy(log: Path, offset: int) -> list[str]:
    """Warning and error lines (and hops scheduled) the daemon logged after ``offset``."""
    with log.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    keys = ('"warning"', '"error"', '"critical"', '"hops_scheduled"')
    return [line[:300] for line in lines if any(k in line for k in keys)]


def measure_idle(
    workdir: Path, config: dict[str, Any], *, window: float, settle: float, profile: Path | None = None
) -> IdleResult:
    """Start the daemon with ``config`` (``node``, ``api`` and ``log`` are set here), measure, stop it."""
    data = {
        **config,
        "node": NODE,
        "api": {"listen": f"127.0.0.1:{free_port()}"},
        "log": {"level": "info", "format": "json"},
    }
    config_path = workdir / "tierd.yaml"
    config_path.write_text(yaml.safe_dump(data))
    argv = [sys.executable, "-m", "tierd", "run", "--config", str(config_path)]
    if profile is not None:
        argv[1:1] = ["-m", "cProfile", "-o", str(profile)]
    log = workdir / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env(),
            cwd=REPO,
            preexec_fn=die_with_parent,
        )
    try:
        _wait_ready(proc, log, timeout=300)
        time.sleep(settle)
        offset = log.stat().st_size
        user0, system0 = daemon_cpu(proc.pid)
        started = time.monotonic()
        time.sleep(window)
        user1, system1 = daemon_cpu(proc.pid)
        elapsed = time.monotonic() - started
        peak = vm_hwm_bytes(proc.pid) or 0
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited during the window: {log.read_text()[-3000:]}")
    finally:
        stop_process(proc)
    return IdleResult(elapsed, user1 - user0, system1 - system0, peak, settle, _noteworthy(log, offset))
