"""A pytest plugin that writes each test's CPU seconds to a CSV: where the suite's time goes.

Load it with ``-p tests.cpu_profile`` and name the file in ``TIERD_CPU_CSV``; each pytest
process (each xdist worker) appends its rows. A row is the test id, its file, the pytest
process's own user+sys CPU over the test's set-up, call and tear-down, the CPU of the children
reaped meanwhile (the daemons and servers it waited for: ``RUSAGE_CHILDREN`` counts a process
once it is reaped, so a module fixture's daemon lands on the module's last test; the daemons
forked from the zygote are counted as it reaps them, ``forked_cpu``), and the wall
seconds. Two more rows per process (xdist's controller: its own CPU only, not its
workers'): ``<collection>`` (CPU from start to the last collected
test) and ``<session-end>`` (what the process spent after its last test). PostgreSQL, which
``pg_ctl`` detaches, is not counted. ``python -m tests.cpu_profile FILE`` sums it per file.
"""

from __future__ import annotations

import csv
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

from tests.fixtures.daemon import forked_cpu

_FIELDS = ["worker", "nodeid", "file", "self_cpu", "children_cpu", "wall"]


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class _Recorder:
    """Appends one CSV row per test (and per phase of the process) to the named file."""

    def __init__(self, path: Path, worker: str, children: bool) -> None:
        self._file = path.open("a", newline="", encoding="utf-8")
        self._children = children
        self._writer = csv.writer(self._file)
        self._worker = worker
        self._mark = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float]:
        children = _cpu(resource.RUSAGE_CHILDREN) + forked_cpu()
        return _cpu(resource.RUSAGE_SELF), children, time.monotonic()

    def row(self, nodeid: str, file: str) -> None:
        """Write the CPU and wall since the last row under ``nodeid``."""
        now = self._now()
        own, children, wall = (round(b - a, 3) for a, b in zip(self._mark, now, strict=True))
        children = children if self._children else 0.0
        self._writer.writerow([self._worker, nodeid, file, own, children, wall])
        self._file.flush()
        self._mark = now

    def close(self) -> None:
        """Close the file."""
        self._file.close()


class CpuProfile:
    """The plugin object: rows for collection, each test and the session's end."""

    def __init__(self, path: Path, worker: str, children: bool) -> None:
        self._recorder = _Recorder(path, worker, children)
        self._recorder._mark = (0.0, 0.0, self._recorder._mark[2])

    def pytest_collection_finish(self) -> None:
        """Everything before the first test: imports, plugins and collection."""
        self._recorder.row("<collection>", "<collection>")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None]:
        """One row per test, set-up through tear-down."""
        yield
        self._recorder.row(item.nodeid, item.nodeid.split("::", 1)[0])

    def pytest_unconfigure(self) -> None:
        """What the process spent after its last test."""
        self._recorder.row("<session-end>", "<session-end>")
        self._recorder.close()


def pytest_configure(config: pytest.Config) -> None:
    """Register the recorder when ``TIERD_CPU_CSV`` names a file."""
    target = os.environ.get("TIERD_CPU_CSV")
    if target:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        # xdist's controller reaps its workers: their CPU is in their own rows already.
        controller = worker == "main" and bool(config.getoption("numprocesses", None))
        profile = CpuProfile(Path(target), worker, children=not controller)
        config.pluginmanager.register(profile, "tierd-cpu-profile")


def per_file(path: Path) -> list[tuple[str, float, float, float, int]]:
    """(file, self CPU, children CPU, wall, tests) per file, most CPU first."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    with path.open(newline="", encoding="utf-8") as handle:
        for record in csv.reader(handle):
            entry = totals[record[2]]
            for index in range(3):
                entry[index] += float(record[3 + index])
            entry[3] += 1
    rows = [(name, own, kids, wall, int(n)) for name, (own, kids, wall, n) in totals.items()]
    return sorted(rows, key=lambda row: -(row[1] + row[2]))


def main(argv: list[str]) -> None:
    """Print the per-file sums of the CSV named in ``argv``, and the whole."""
    rows = per_file(Path(argv[0]))
    limit = int(argv[1]) if len(argv) > 1 else len(rows)
    print(f"{'cpu':>8} {'self':>8} {'child':>8} {'wall':>8} {'tests':>5}  file")
    for name, own, kids, wall, count in rows[:limit]:
        print(f"{own + kids:8.1f} {own:8.1f} {kids:8.1f} {wall:8.1f} {count:5d}  {name}")
    own = sum(row[1] for row in rows)
    kids = sum(row[2] for row in rows)
    print(f"{own + kids:8.1f} {own:8.1f} {kids:8.1f} {'':>8} {'':>5}  whole ({len(rows)} files)")


if __name__ == "__main__":
    main(sys.argv[1:])
