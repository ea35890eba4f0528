"""What a comparison's result line carries: each contestant's runs and spread, CPU time and
peak RSS, the ratio of medians, and the conditions (the machine's load, other processes' CPU).

A comparison has tierd's side (this tree), the baseline (the standard tool), and with
``--against`` the other tree's tierd (``against``), all run round by round in the order
``interleaved`` gives, so every contestant sees the same conditions, in turn.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import filesystem_type

#: Issue 25's goal for the daemon's peak RSS (VmHWM), in every benchmark.
RSS_GOAL = 150_000_000

if TYPE_CHECKING:
    from bench.datasets import Dataset
    from bench.harness import Settings, Timed
    from bench.sides import Side

__all__ = ["Cpu", "OtherLoad", "Runs", "Series", "interleaved", "process_cpu"]


@dataclass(frozen=True)
class Cpu:
    """CPU time in seconds: user and system (kernel work done in the process's context)."""

    user: float
    system: float

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.user - other.user, self.system - other.system)

    @property
    def total(self) -> float:
        """User plus system."""
        return self.user + self.system


def process_cpu(pid: int) -> Cpu:
    """CPU time of a live process (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return Cpu(int(fields[11]) / tick, int(fields[12]) / tick)


def interleaved(contestants: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """``(round, contestant)`` in running order: every contestant once a round, the order rotated
    by one each round, so none always runs first (after a ``sync``) or right after another."""
    for round_ in range(rounds):
        shift = round_ % len(contestants)
        for name in [*contestants[shift:], *contestants[:shift]]:
            yield round_, name


def _processes() -> dict[int, tuple[int, int]]:
    """{pid: (ppid, CPU ticks used)} of every process now."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        fields = text.rpartition(")")[2].split()
        found[int(stat.parent.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return found


def _tree(root: int, *snapshots: dict[int, tuple[int, int]]) -> set[int]:
    children: dict[int, set[int]] = {}
    for snapshot in snapshots:
        for pid, (ppid, _) in snapshot.items():
            children.setdefault(ppid, set()).add(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, set()) - tree)
    return tree


class OtherLoad:
    """CPU time that processes outside this benchmark used while a comparison ran.

    A lower bound: a process that starts and exits in between is missed. Kernel
    threads (writeback, journal) are left out: they also work for the benchmark.
    """

    def __init__(self) -> None:
        self._start = _processes()
        self._started = time.monotonic()

    def result(self) -> dict[str, float]:
        """``other_processes_cpu_seconds`` and the share of all CPUs it took."""
        end = _processes()
        ours = _tree(os.getpid(), self._start, end)
        ticks = sum(
            used - self._start.get(pid, (ppid, 0))[1]
            for pid, (ppid, used) in end.items()
            if pid not in ours and pid != 2 and ppid != 2
        )
        seconds = max(ticks, 0) / os.sysconf("SC_CLK_TCK")
        share = seconds / ((time.monotonic() - self._started) * (os.cpu_count() or 1))
        return {
            "other_processes_cpu_seconds": round(seconds, 2),
            "other_processes_cpu_share": round(share, 3),
        }


@dataclass
class Series:
    """One contestant's runs: wall seconds, CPU times (when measured) and peak RSS."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[Cpu] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)

    def add(self, seconds: float, cpu: Cpu | None, peak: int | None) -> None:
        """One run."""
        self.seconds.append(seconds)
        if cpu is not None:
            self.cpu.append(cpu)
        if peak is not None:
            self.peaks.append(peak)

    @property
    def median(self) -> float:
        """Median seconds."""
        return statistics.median(self.seconds)

    @property
    def cpu_median(self) -> float | None:
        """Median CPU seconds (user + system), None when not measured."""
        return statistics.median(c.total for c in self.cpu) if self.cpu else None

    def fields(self, prefix: str) -> dict[str, Any]:
        """``<prefix>_runs``, ``_spread`` [min, median, max], ``_cpu_seconds`` (median), and the like."""
        cpu, user = self.cpu_median, statistics.median(c.user for c in self.cpu) if self.cpu else None
        return {
            f"{prefix}_runs": [round(x, 3) for x in self.seconds],
            f"{prefix}_spread": [round(x, 3) for x in (min(self.seconds), self.median, max(self.seconds))],
            f"{prefix}_cpu_seconds": None if cpu is None else round(cpu, 2),
            f"{prefix}_cpu_user_seconds": None if user is None else round(user, 2),
            f"{prefix}_cpu_runs": [round(c.total, 2) for c in self.cpu],
        }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


class Runs:
    """Times, CPU times and peaks collected over the rounds of one comparison."""

    def __init__(self, time_goal: float, rss_goal: int, against: Side | None = None) -> None:
        self.time_goal, self.rss_goal, self.against = time_goal, rss_goal, against
        self.load_before = os.getloadavg()
        self.others = OtherLoad()
        self.series = {"tierd": Series(), "baseline": Series(), "against": Series()}

    @property
    def contestants(self) -> list[str]:
        """Who runs each round: tierd, ``against`` when set, the baseline."""
        return ["tierd", *(["against"] if self.against else []), "baseline"]

    def add_tierd(self, seconds: float, cpu: Cpu | None, peak: int) -> None:
        """One run of tierd's side."""
        self.series["tierd"].add(seconds, cpu, peak)

    def add_against(self, seconds: float, cpu: Cpu | None, peak: int) -> None:
        """One run of the other tree's tierd."""
        self.series["against"].add(seconds, cpu, peak)

    def add_baseline(self, run: Timed) -> None:
        """One run of the baseline."""
        self.series["baseline"].add(run.seconds, run.cpu, None)

    @property
    def tierd(self) -> list[float]:
        """tierd's seconds, run by run."""
        return self.series["tierd"].seconds

    @property
    def baseline(self) -> list[float]:
        """The baseline's seconds, run by run."""
        return self.series["baseline"].seconds

    @property
    def peaks(self) -> list[int]:
        """tierd's peak RSS, run by run."""
        return self.series["tierd"].peaks

    @property
    def medians(self) -> tuple[float, float]:
        """(tierd, baseline) median seconds."""
        return self.series["tierd"].median, self.series["baseline"].median

    def summary(self, dataset: Dataset, settings: Settings, base: Path) -> dict[str, Any]:
        """The fields every result line of a comparison carries."""
        from bench.sides import this_tree

        t, b = self.medians
        tierd, baseline = self.series["tierd"], self.series["baseline"]
        return {
            **dataset.describe(),
            "tierd_gib_per_s": round(dataset.total_bytes / t / 2**30, 3),
            "baseline_gib_per_s": round(dataset.total_bytes / b / 2**30, 3),
            **tierd.fields("tierd"),
            **baseline.fields("baseline"),
            **self._against_fields(),
            "rounds": len(tierd.seconds),
            "statistic": f"median; {', '.join(self.contestants)} interleaved, the order rotated each round"
            if len(tierd.seconds) > 1
            else "single run",
            "page_cache": settings.cache_note,
            "filesystem": filesystem_type(base),
            "loadavg_1m_before_after": [round(self.load_before[0], 2), round(os.getloadavg()[0], 2)],
            "loadavg_1_5_15m_before_after": [[round(x, 2) for x in self.load_before], _loadavg()],
            **self.others.result(),
            "tierd_source": this_tree().source,
            "goal": f"ratio <= {self.time_goal}; tierd peak RSS (VmHWM) < {self.rss_goal} bytes",
            "time_goal_met": t / b <= self.time_goal,
            "rss_goal_met": max(self.peaks) < self.rss_goal,
        }

    def _against_fields(self) -> dict[str, Any]:
        """With ``against``: its runs, spread, CPU and peak, and this tree's ratios to it."""
        if self.against is None:
            return {}
        tierd, other, baseline = self.series["tierd"], self.series["against"], self.series["baseline"]
        return {
            "against_source": self.against.source,
            **other.fields("against"),
            "against_peak_rss_bytes": max(other.peaks),
            "against_ratio": _ratio(other.median, baseline.median),
            "ratio_to_against": _ratio(tierd.median, other.median),
            "cpu_ratio_to_against": _ratio(tierd.cpu_median, other.cpu_median),
        }


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
