"""Read the raw stacks ``TIERD_BENCH_PROFILER=py-spy`` (or ``py-spy-gil``) wrote for each hop.

``python -m bench.stacks A.stacks [A2.stacks ...] [--against B.stacks ...] [--top N]``
prints, per run, the samples of each function: its own (the innermost frame) and under it
(anywhere in the stack), for the files given, and with ``--against`` both sets and their
difference, the functions that grew most first. Frames are named ``function (file)``, line
numbers dropped, so two commits' profiles line up as long as the names do.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Profile", "main"]

_LINE = re.compile(r":\d+\)$")


@dataclass
class Profile:
    """Sample counts of some runs' stacks: per function, its own and under it."""

    runs: int = 0
    samples: int = 0
    own: Counter[str] = field(default_factory=Counter)
    under: Counter[str] = field(default_factory=Counter)

    @classmethod
    def read(cls, paths: list[Path]) -> Profile:
        """Add up py-spy's raw output (``thread;frame;...;frame count`` a line) of each file."""
        profile = cls(runs=len(paths))
        for path in paths:
            for line in path.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not stack or not count.isdigit():
                    continue
                frames = [_LINE.sub(")", frame) for frame in stack.split(";")[1:]]  # [0] names the thread
                profile.samples += int(count)
                profile.own[frames[-1] if frames else "(no Python frame)"] += int(count)
                for frame in set(frames):
                    profile.under[frame] += int(count)
        return profile

    def per_run(self, counter: Counter[str], name: str) -> float:
        """``counter[name]`` per run."""
        return counter[name] / max(self.runs, 1)


def _table(a: Profile, b: Profile | None, counter: str, top: int) -> list[str]:
    rows = []
    ours: Counter[str] = getattr(a, counter)
    theirs: Counter[str] = getattr(b, counter) if b else Counter()
    if b is None:
        ranked = sorted(ours, key=lambda n: -ours[n])
    else:
        ranked = sorted(set(ours) | set(theirs), key=lambda n: b.per_run(theirs, n) - a.per_run(ours, n))
    for name in ranked[:top]:
        mine = a.per_run(ours, name)
        if b is None:
            rows.append(f"{mine:9.1f} {100 * mine * a.runs / max(a.samples, 1):5.1f}%  {name}")
        else:
            other = b.per_run(theirs, name)
            rows.append(f"{mine:9.1f} {other:9.1f} {mine - other:+9.1f}  {name}")
    return rows


def main(argv: list[str]) -> int:
    """Print the tables; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.stacks", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--against", nargs="+", type=Path, default=[])
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    a = Profile.read(args.files)
    b = Profile.read(args.against) if args.against else None
    heading = "per run" if b is None else "per run: these, --against, difference"
    print(f"samples per run: {a.samples / a.runs:.0f}" + (f" vs {b.samples / b.runs:.0f}" if b else ""))
    for counter, title in (("own", "own samples"), ("under", "samples under")):
        print(f"--- {title} ({heading})")
        print("\n".join(_table(a, b, counter, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
