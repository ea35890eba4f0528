"""Run the benchmarks.

``python -m bench`` runs every ``bench/bench_*.py``; ``python -m bench copy s3`` runs
``bench_copy`` and ``bench_s3`` only. ``--rounds N`` runs every comparison N rounds (the
``TIERD_BENCH_*ROUNDS`` variables). ``--against REV`` also runs the daemon of commit REV
(checked out in a scratch worktree, ``bench.sides``) in every round, interleaved with this
tree's and the baseline, and reports both trees' figures and their ratio; it takes the
benchmarks that can run another tree (``AGAINST = True`` in their module), all of them when
none is named.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from bench.sides import AGAINST_VARIABLE, resolve, scratch_worktree

#: What ``--rounds`` sets: the rounds of the big checkpoints and of each small one.
ROUND_VARIABLES = (
    "TIERD_BENCH_ROUNDS",
    "TIERD_BENCH_COPY_SMALL_ROUNDS",
    "TIERD_BENCH_S3_SMALL_ROUNDS",
    "TIERD_BENCH_RESTORE_SMALL_ROUNDS",
)


def available() -> list[str]:
    """The short names of every benchmark module beside this file, sorted."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"bench.bench_{name}")


def comparable() -> list[str]:
    """The benchmarks that can run another tree's daemon: ``AGAINST = True`` in their source.

    Read, not imported: importing every benchmark (torch, boto3, ...) took half a minute.
    """
    here = Path(__file__).resolve().parent
    marked = re.compile(r"^AGAINST = True\b", re.MULTILINE)
    return [name for name in available() if marked.search((here / f"bench_{name}.py").read_text())]


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return number


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line; exits (status 2) naming what is wrong with it."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    names = f"benchmarks to run: {', '.join(available())}"
    parser.add_argument("names", nargs="*", metavar="NAME", help=names)
    parser.add_argument("--against", metavar="REV", help="also run commit REV, interleaved round by round")
    parser.add_argument("--rounds", type=_positive, metavar="N", help="rounds of every comparison")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in available()]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {available()}")
    if args.against is not None:
        try:
            args.commit = resolve(args.against)
        except ValueError as exc:
            parser.error(str(exc))
        supported = comparable()
        if unsupported := [n for n in args.names if n not in supported]:
            parser.error(f"--against runs only {supported}; not {unsupported}")
        args.names = args.names or supported
    args.names = args.names or available()
    return args


def main(argv: list[str]) -> int:
    """Run what ``argv`` asks for; the exit status."""
    args = parse(argv)
    if args.rounds is not None:
        os.environ.update({variable: str(args.rounds) for variable in ROUND_VARIABLES})
    if args.against is None:
        _run(args.names)
        return 0
    with scratch_worktree(args.commit) as path:
        os.environ[AGAINST_VARIABLE] = str(path)
        _run(args.names)
    return 0


def _run(names: list[str]) -> None:
    for name in names:
        _module(name).main()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
