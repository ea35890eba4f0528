"""Helpers shared by the benchmarks: peak memory, page-cache control, JSON results."""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

__all__ = ["drop_from_cache", "emit", "peak_rss_bytes", "percentile"]


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far, in bytes (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


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


def emit(
    name: str, tierd_seconds: float, baseline: str, baseline_seconds: float, **extra: Any
) -> dict[str, Any]:
    """Print one benchmark result as a JSON line on stdout and return it."""
    result: dict[str, Any] = {
        "name": name,
        "tierd_seconds": round(tierd_seconds, 6),
        "baseline": baseline,
        "baseline_seconds": round(baseline_seconds, 6),
        "ratio": round(tierd_seconds / baseline_seconds, 4) if baseline_seconds else None,
        "peak_rss_bytes": peak_rss_bytes(),
        **extra,
    }
    print(json.dumps(result), flush=True)
    sys.stdout.flush()
    return result
