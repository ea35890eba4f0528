"""The daemon caps glibc's malloc arenas when it starts (``libc.limit_malloc_arenas``): threads
each took an arena of their own, and memory freed in one could not serve another."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Eight threads allocate at once, then glibc's ``malloc_stats`` lists the arenas on stderr.
_ARENAS_AFTER_THREADS = """
import ctypes, sys, threading
from tierd.daemon import libc
if sys.argv[1] == "limit":
    assert libc.limit_malloc_arenas()
barrier = threading.Barrier(8)
def allocate():
    barrier.wait()
    kept = [bytearray(1000) for _ in range(1000)]
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc.function("malloc_stats", [], None)()
"""


def _arenas(mode: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS_AFTER_THREADS, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_stats")
def test_the_limit_keeps_threads_to_two_arenas() -> None:
    assert _arenas("free") > 2  # glibc's default: a new arena for each new thread, up to 8 per core
    assert _arenas("limit") <= 2


def test_an_operators_malloc_arena_max_stands() -> None:
    code = "from tierd.daemon import libc; print(libc.limit_malloc_arenas())"
    env = {**os.environ, "MALLOC_ARENA_MAX": "4"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "False"


def test_the_daemon_limits_its_arenas_before_its_loop_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``runtime.run`` calls the limit before ``asyncio.run`` (and so before any thread of its own)."""
    from tierd.daemon import runtime

    calls: list[str] = []

    class FakeDaemon:
        def __init__(self, *args: object, **kwargs: object) -> None:
            calls.append("daemon")

        async def run(self) -> None:
            calls.append("loop")

    def limit() -> bool:
        calls.append("limit")
        return True

    monkeypatch.setattr(runtime, "Daemon", FakeDaemon)
    monkeypatch.setattr(runtime, "limit_malloc_arenas", limit)
    runtime.run(None)  # type: ignore[arg-type]
    assert calls == ["limit", "daemon", "loop"]
