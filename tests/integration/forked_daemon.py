"""The daemon as a real process, forked from one that has already imported tierd.

Importing tierd's daemon (FastAPI, SQLAlchemy, aioboto3, ...) takes 1-5 s on a loaded CI
machine: more than a whole kill cycle of a soak. So a parent process (the "zygote") imports
it once, then forks a child per run that calls ``tierd.cli.main.main(["run", ...])`` with its
output appended to the log: the daemon's real code in a real process, killed with a real
SIGKILL, without paying the imports fifty times. The zygote ignores SIGCHLD, so the kernel
reaps each child the moment it dies: a gone pid means a dead daemon.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.s3servers import die_with_parent

__all__ = ["ForkedDaemon"]

ZYGOTE = r"""
import ctypes, json, os, signal, sys
import tierd.cli.main, tierd.daemon.runtime, tierd.api.app  # the imports every child shares

signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel as they die
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = 1
        try:
            code = tierd.cli.main.main(request["argv"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(pid, flush=True)
"""


@dataclass
class ForkedDaemon:
    """``tierd run --config <config_path>`` runs forked from the zygote, logging to ``log_path``.

    The same calls as ``daemon_helpers.DaemonProcess`` where a soak needs them; there is no
    exit code (the kernel reaped the child), so a graceful stop is checked on a real
    ``DaemonProcess`` instead.
    """

    config_path: Path
    log_path: Path
    pid: int | None = None
    runs: int = 0
    _zygote: subprocess.Popen[str] | None = None
    _offsets: list[int] = field(default_factory=list)

    def spawn(self) -> subprocess.Popen[str]:
        """The zygote, started on first use (call it before the test starts threads of its own)."""
        if self._zygote is None:
            self._zygote = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=die_with_parent,
            )
        return self._zygote

    def start(self) -> None:
        """Fork a new run of the daemon."""
        assert not self.alive()
        zygote = self.spawn()
        assert zygote.stdin is not None
        assert zygote.stdout is not None
        self._offsets.append(self.log_path.stat().st_size if self.log_path.exists() else 0)
        argv = ["run", "--config", str(self.config_path)]
        zygote.stdin.write(json.dumps({"argv": argv, "log": str(self.log_path)}) + "\n")
        zygote.stdin.flush()
        self.pid = int(zygote.stdout.readline())
        self.runs += 1

    def alive(self) -> bool:
        """Whether the current run's process still exists (a dead child is reaped at once)."""
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL, and wait until the process is gone: no cleanup of any kind runs."""
        assert self.pid is not None
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.alive():
            if time.monotonic() > deadline:
                raise AssertionError(f"daemon {self.pid} outlived SIGKILL by 10 s")
            time.sleep(0.005)
        self.pid = None

    def logged(self, event: str) -> bool:
        """Whether the current run has logged ``event`` yet (reads only that run's lines)."""
        if not self._offsets or not self.log_path.exists():
            return False
        with self.log_path.open("rb") as log:
            log.seek(self._offsets[-1])
            text = log.read().decode(errors="replace")
        needle = json.dumps(event)
        for line in text.splitlines():
            if line.startswith("{") and needle in line:
                try:
                    if json.loads(line).get("event") == event:
                        return True
                except json.JSONDecodeError:  # a line still being written
                    continue
        return False

    def close(self) -> None:
        """Kill a run still going, then the zygote."""
        if self.alive():
            self.kill()
        if self._zygote is not None:
            self._zygote.kill()
            self._zygote.wait(timeout=10)
            for stream in (self._zygote.stdin, self._zygote.stdout):
                if stream is not None:
                    stream.close()
            self._zygote = None

    def tail(self) -> str:
        """The end of the log."""
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""
