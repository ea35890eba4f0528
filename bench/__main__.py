"""Run the benchmarks: ``python -m bench`` runs every ``bench/bench_*.py``; ``python -m bench
detect pipeline`` runs ``bench_detect`` and ``bench_pipeline`` only.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def available() -> list[str]:
    """The short names of every benchmark module beside this file, sorted."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))


def main(argv: list[str]) -> int:
    names = available()
    wanted = argv or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {names}", file=sys.stderr)
        return 2
    for name in wanted:
        module = importlib.import_module(f"bench.bench_{name}")
        module.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
