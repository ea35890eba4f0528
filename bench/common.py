"""Helpers shared by the benchmarks: peak memory, page-cache control, JSON results, settings."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "REPO",
    "bench_root",
    "drop_from_cache",
    "emit",
    "env_float",
    "env_int",
    "filesystem_type",
    "note",
    "peak_rss_bytes",
    "percentile",
    "quick",
    "vm_hwm_bytes",
]

REPO = Path(__file__).resolve().parent.parent
_STARTED = time.monotonic()


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far, in bytes (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def vm_hwm_bytes(pid: int | str = "self") -> int | None:
    """A live process's own peak RSS (``VmHWM``), in bytes; None once it has exited."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None  # a zombie has no memory map left


def drop_from_cache(paths: list[Path]) -> None:
    """Write back and evict ``paths`` from the page cache (``posix_fadvise(DONTNEED)``)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, nearest-rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def note(message: str) -> None:
    """A progress line on stderr (stdout carries only results)."""
    print(f"[bench +{time.monotonic() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def quick() -> bool:
    """Whether ``TIERD_BENCH_QUICK`` asks for a smoke run (small data, one round)."""
    return os.environ.get("TIERD_BENCH_QUICK", "").lower() not in ("", "0", "false", "no")


def env_int(name: str, default: int) -> int:
    """An integer setting from the environment."""
    value = os.environ.get(name)
    return int(value) if value else default


def env_float(name: str, default: float) -> float:
    """A number setting from the environment."""
    value = os.environ.get(name)
    return float(value) if value else default


def bench_root() -> Path:
    """Where benchmarks put their data: ``$TIERD_BENCH_DIR``, else ``<repo>/var/bench``."""
    root = Path(os.environ.get("TIERD_BENCH_DIR") or REPO / "var" / "bench")
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def filesystem_type(path: Path) -> str:
    """The type of the file system holding ``path`` (``ext4``, ``tmpfs``, ...), from /proc/mounts."""
    best, kind = "", "unknown"
    target = str(path.resolve())
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind


def emit(
    name: str,
    tierd_seconds: float,
    baseline: str,
    baseline_seconds: float,
    *,
    peak_rss: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Print one benchmark result as a JSON line on stdout and return it.

    ``peak_rss`` is tierd's peak RSS when it ran in another process; by default this
    process's own peak is reported.
    """
    result: dict[str, Any] = {
        "name": name,
        "tierd_seconds": round(tierd_seconds, 6),
        "baseline": baseline,
        "baseline_seconds": round(baseline_seconds, 6),
        "ratio": round(tierd_seconds / baseline_seconds, 4) if baseline_seconds else None,
        "peak_rss_bytes": peak_rss if peak_rss is not None else peak_rss_bytes(),
        **extra,
    }
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    return result


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Send ``sig`` to ``proc`` if it still runs, wait up to ``timeout`` seconds, then kill it."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
