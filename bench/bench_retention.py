"""Retention over a big catalog: one full pass, its parts, and the idle daemon's CPU.

Issue 15's goals: on a catalog of 10,000 checkpoints and 1,000,000 file rows, on SQLite and on
PostgreSQL, one full retention pass under 1 s, and the daemon's idle CPU (nothing to copy,
retention every 60 s) under 0.5 % of a core.

The catalog (``bench.retention_catalog``: 10 runs x 1,000 steps, 100 files each, four tiers,
every replica verified, a few pins, holds and metrics) is written straight into freshly
migrated tables, on a SQLite file and on a PostgreSQL started for the benchmark (initdb,
``fsync`` on). The tiers' policies (``POLICIES``): ``nvme`` (tier 0) ``keep_last: 3``;
``pfs`` ``keep_every_steps: 1000`` + ``keep_last: 20``; ``s3`` ``keep_within: 30d`` +
``keep_best: {eval_loss, 3, min}``; ``dr`` keeps everything. All four are POSIX directories:
no bytes exist and nothing deletes any in the timed part (deletions wait out ``delete_delay``).

In-process, through ``RetentionService.run_pass(now)`` with the daemon's logging (info, JSON,
rendered and written to /dev/null), each a median over ``rounds``:

- ``retention_load_<db>``: ``catalog.retention.load_retention_rows`` alone;
- ``retention_snapshot_<db>``: ``take_snapshot`` (the load and the pure planner);
- ``retention_pass_dry_run_<db>``: a pass with ``retention.dry_run: true`` (plans the whole
  catalog, logs every replica it would delete, changes nothing);
- ``retention_pass_schedule_<db>``: the first pass with ``dry_run: false``, which schedules
  every deletion the plan wants (a fresh copy of the catalog for each run);
- ``retention_pass_<db>``: later passes on that catalog that plan it all again (as after any
  change: nothing new to schedule, no deletion due, no disk pressure);
- ``retention_pass_idle_<db>``: passes over that catalog unchanged since the last plan (the
  service reads its ``change_marker``, one row, and plans nothing);
- ``retention_idle_cpu_<db>``: the real daemon on that catalog (``bench.retention_idle``),
  retention every 60 s, CPU over ``TIERD_BENCH_IDLE_SECONDS`` (120; PostgreSQL
  ``TIERD_BENCH_PG_IDLE_SECONDS``, 60) after a settle time.

``ratio`` is seconds / goal (1 s for a pass and its parts; 0.5 % of the window for CPU). A pass
over its goal is run once more under cProfile and ``profile_top`` lists what dominates.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import logging
import os
import pstats
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from bench.common import bench_root, emit, env_float, env_int, filesystem_type, note, quick
from bench.harness import tierd_source
from bench.results import OtherLoad
from bench.retention_catalog import TIERS, Shape, describe_built, fill_catalog
from bench.retention_idle import measure_idle
from tests.fixtures.pgserver import PostgresServer, pg_available, postgres_server
from tierd.config import Config
from tierd.daemon import aio
from tierd.daemon.aio import shutdown_executor
from tierd.daemon.backends import close_backends, make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.catalog.retention import load_retention_rows
from tierd.daemon.context import Context
from tierd.daemon.retention.plan import plan_retention
from tierd.daemon.retention.service import PassReport, RetentionService
from tierd.daemon.retention.snapshot import take_snapshot
from tierd.daemon.retention.state import tier_rules
from tierd.logs import configure_logging

PASS_GOAL = 1.0
IDLE_GOAL_SHARE = 0.005
INTERVAL = 60.0
POLICIES: dict[str, dict[str, Any]] = {
    "nvme": {"keep_last": 3},
    "pfs": {"keep_every_steps": 1000, "keep_last": 20},
    "s3": {"keep_within": "30d", "keep_best": {"metric": "eval_loss", "n": 3, "mode": "min"}},
    "dr": {},
}


def _config(base: Path, url: str, *, dry_run: bool) -> dict[str, Any]:
    """The daemon's config as a YAML-able dict: four POSIX tiers, a watched (empty) job directory."""
    tiers: list[dict[str, Any]] = [
        {"name": name, "kind": "posix", "path": str(base / "tiers" / name), "retention": POLICIES[name]}
        for name in TIERS
    ]
    for tier in tiers:
        Path(tier["path"]).mkdir(parents=True, exist_ok=True)
    jobs = base / "tiers" / "nvme" / "jobs"
    jobs.mkdir(exist_ok=True)
    return {
        "catalog": {"url": url},
        "tiers": tiers,
        "watch": [{"path": str(jobs), "run": "bench", "format": "dcp"}],
        "retention": {"dry_run": dry_run, "interval": INTERVAL},
    }


class _LineCounter(io.TextIOBase):
    """A log stream that keeps nothing and counts lines."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)


@contextmanager
def _daemon_logging() -> Iterator[_LineCounter]:
    """The daemon's logging (info, JSON lines rendered), written nowhere; quiet again afterwards."""
    configure_logging("info", "json")
    sink = _LineCounter()
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(sink)
    try:
        yield sink
    finally:
        configure_logging("warning", "json")


@dataclass
class _Runs:
    """Wall and CPU seconds (this process, every thread) of each run."""

    wall: list[float]
    cpu: list[float]

    @classmethod
    def of(cls, fn: Callable[[], object], rounds: int) -> _Runs:
        runs = cls([], [])
        for _ in range(rounds):
            runs.add(fn)
        return runs

    def add(self, fn: Callable[[], object]) -> object:
        cpu, wall = time.process_time(), time.perf_counter()
        result = fn()
        self.wall.append(time.perf_counter() - wall)
        self.cpu.append(time.process_time() - cpu)
        return result

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    def fields(self) -> dict[str, Any]:
        return {
            "runs_seconds": [round(x, 4) for x in self.wall],
            "cpu_seconds": round(statistics.median(self.cpu), 4),
            "rounds": len(self.wall),
            "statistic": "median" if len(self.wall) > 1 else "single run",
        }


#: Functions that only wait: the event loop for the I/O thread, the I/O thread for work.
_WAITS = ("select.epoll", "_queue.SimpleQueue")


def _profile_top(fn: Callable[[], object], count: int = 10) -> list[str]:
    """``fn`` once under cProfile: the ``count`` functions with the most own time.

    A pass does its work on tierd's I/O threads (``aio.blocking``): for this run they are one
    thread that profiles itself, and its profile is added to this thread's. The event loop's
    wait for that thread (``epoll``) and the thread's wait for work are left out.
    """
    here, worker = cProfile.Profile(), cProfile.Profile()
    pool = ThreadPoolExecutor(1, thread_name_prefix="tierd-io", initializer=worker.enable)
    previous = aio._executors.get("io")
    aio._executors["io"] = pool
    try:
        here.runcall(fn)
    finally:
        pool.submit(worker.disable).result()
        pool.shutdown()
        if previous is None:
            del aio._executors["io"]
        else:
            aio._executors["io"] = previous
    stats = pstats.Stats(here)
    stats.add(worker)
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    rows = [item for item in table.items() if not any(w in item[0][2] for w in _WAITS)]
    rows.sort(key=lambda item: item[1][2], reverse=True)
    out = [f"{sum(row[1][2] for row in rows):.3f} s of work in all (profiled, waits left out)"]
    for (path, line, name), (_, calls, own, cumulative, _) in rows[:count]:
        where = f"{Path(path).parent.name}/{Path(path).name}:{line}" if line else path
        out.append(f"{own:.3f} s own, {cumulative:.3f} s cum, {calls} calls: {name} ({where})")
    return out


class _Store(Protocol):
    """Where the benchmark's catalogs live: create one (or a copy of another), drop one."""

    label: str
    version: str

    def url(self, name: str) -> str: ...

    def create(self, name: str, *, template: str | None = None) -> str: ...

    def drop(self, name: str) -> None: ...


class _SqliteStore:
    """Catalogs as SQLite files in one directory; a copy is a copy of the file."""

    label = "sqlite"
    version = f"SQLite {sqlite3.sqlite_version}"

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, name: str) -> Path:
        return self.root / f"{name}.db"

    def url(self, name: str) -> str:
        return f"sqlite:///{self._path(name)}"

    def create(self, name: str, *, template: str | None = None) -> str:
        if template is not None:
            shutil.copyfile(self._path(template), self._path(name))
        return self.url(name)

    def drop(self, name: str) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self._path(name)}{suffix}").unlink(missing_ok=True)


class _PostgresStore:
    """Catalogs as databases of one server; a copy is ``createdb -T``."""

    label = "postgresql"

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.version = server.version

    def url(self, name: str) -> str:
        return self.server.url(name)

    def create(self, name: str, *, template: str | None = None) -> str:
        return self.server.create(name, template=template)

    def drop(self, name: str) -> None:
        self.server.drop(name)


@dataclass(frozen=True)
class _Setting:
    """What every result line of one database carries."""

    base: Path
    shape: Shape
    now: datetime
    rounds: int
    schedule_rounds: int

    def conditions(self, store: _Store, others: OtherLoad, load_before: float) -> dict[str, Any]:
        return {
            "database": store.label,
            "database_version": store.version,
            **self.shape.describe(),
            "policies": POLICIES,
            "filesystem": filesystem_type(self.base),
            "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            **others.result(),
            "tierd_source": tierd_source(),
        }


def _service(config: Config, db: Database) -> RetentionService:
    backends = {t.name: make_backend(t) for t in config.tiers}
    return RetentionService(Context(config=config, db=db), backends)


def _one_pass(service: RetentionService, now: datetime, *, replan: bool = True) -> PassReport:
    """``run_pass(now)`` in an event loop of its own (as the daemon's loop would run it).

    ``replan`` wakes the service first, so the pass plans the whole catalog again (as after
    any change); without it, a pass over an unchanged catalog reads one row and stops.
    """

    async def run() -> PassReport:
        if replan:
            service.wake()
        try:
            return await service.run_pass(now)
        finally:
            await close_backends(service.deleter.backends)

    return asyncio.run(run())


def _emit_pass(name: str, runs: _Runs, extra: dict[str, Any], profile: Callable[[], object] | None) -> None:
    """One result line, goal 1 s; over it, what a profiled run spends its time on."""
    fields = {**runs.fields(), **extra}
    if runs.median > PASS_GOAL and profile is not None:
        note(f"{name}: {runs.median:.2f} s, over the goal: profiling one more run")
        fields["profile_top"] = _profile_top(profile)
    met = runs.median < PASS_GOAL
    emit(name, runs.median, f"goal: under {PASS_GOAL} s", PASS_GOAL, goal_met=met, **fields)


def _parts(setting: _Setting, db: Database, config: Config, common: dict[str, Any]) -> None:
    """Time the load alone, the snapshot (load + plan), and the plan alone."""
    rules = tier_rules(config)
    now = setting.now

    def load() -> object:
        with db.read_session() as session:
            return load_retention_rows(session)

    def snapshot() -> object:
        return take_snapshot(db, rules, now)

    loads = _Runs.of(load, setting.rounds)
    snapshots = _Runs.of(snapshot, setting.rounds)
    checkpoints = take_snapshot(db, rules, now).checkpoints
    plans = _Runs.of(lambda: plan_retention(checkpoints, rules, now), setting.rounds)
    label = common["database"]
    _emit_pass(f"retention_load_{label}", loads, common, load)
    plan = {"plan_alone_seconds": round(plans.median, 4), "plan_alone_runs": plans.fields()["runs_seconds"]}
    _emit_pass(f"retention_snapshot_{label}", snapshots, {**common, **plan}, snapshot)


def _dry_run(setting: _Setting, db: Database, url: str, common: dict[str, Any]) -> None:
    """Passes with ``retention.dry_run: true``: the whole plan, logged, nothing changed."""
    service = _service(Config(**_config(setting.base, url, dry_run=True)), db)

    def one() -> object:
        return _one_pass(service, setting.now)

    with _daemon_logging() as sink:
        runs = _Runs.of(one, setting.rounds)
        lines = sink.lines
        plan = take_snapshot(db, service.deleter.rules, setting.now).plan
        would = sum(1 for v in plan.deletions() if v.schedules_deletion)
        extra = {**common, "would_delete": would, "log_lines_per_pass": lines // setting.rounds}
        _emit_pass(f"retention_pass_dry_run_{common['database']}", runs, extra, one)


class _Copy:
    """A copy of the template catalog and a real (``dry_run: false``) retention service over it."""

    def __init__(self, setting: _Setting, store: _Store, name: str, *, fresh: bool = True) -> None:
        self.store, self.name, self.now = store, name, setting.now
        if fresh:
            store.drop(name)
        url = store.create(name, template="template") if fresh else store.url(name)
        self.db = Database(url)
        self.service = _service(Config(**_config(setting.base, url, dry_run=False)), self.db)
        self.db.ping()  # connected beforehand, as a running daemon's pool is

    def run_pass(self) -> PassReport:
        """One pass at the benchmark's ``now``, planning the whole catalog again."""
        return _one_pass(self.service, self.now)

    def idle_pass(self) -> PassReport:
        """One pass at the benchmark's ``now`` over a catalog unchanged since the last plan."""
        return _one_pass(self.service, self.now, replan=False)

    def close(self, *, drop: bool) -> None:
        """Close its connections; drop the copy too with ``drop``."""
        self.db.dispose()
        if drop:
            self.store.drop(self.name)


def _scheduling(setting: _Setting, store: _Store, common: dict[str, Any]) -> str:
    """The first real pass on fresh copies of the catalog, then later passes on the last copy.

    Returns the name of that copy: every deletion scheduled, none due (the steady state).
    """
    first = _Runs([], [])
    scheduled: list[int] = []
    label = common["database"]
    with _daemon_logging():
        for round_ in range(setting.schedule_rounds):
            copy = _Copy(setting, store, "scheduled")
            report = first.add(copy.run_pass)
            assert isinstance(report, PassReport)
            assert not report.outcomes, "no deletion may be due"
            scheduled.append(report.scheduled)
            copy.close(drop=round_ < setting.schedule_rounds - 1)
        profile = None
        if first.median > PASS_GOAL:
            profiled = _Copy(setting, store, "profiled")
            profile = profiled.run_pass
        extra = {**common, "scheduled": scheduled, "delete_delay_seconds": 3600}
        _emit_pass(f"retention_pass_schedule_{label}", first, extra, profile)
        if profile is not None:
            profiled.close(drop=True)
        steady = _Copy(setting, store, "scheduled", fresh=False)
        runs = _Runs.of(steady.run_pass, setting.rounds)
        _emit_pass(f"retention_pass_{label}", runs, common, steady.run_pass)
        idle = _Runs.of(steady.idle_pass, setting.rounds)
        _emit_pass(f"retention_pass_idle_{label}", idle, common, steady.idle_pass)
        steady.close(drop=False)
    return "scheduled"


def _idle(setting: _Setting, store: _Store, name: str, window: float, common: dict[str, Any]) -> None:
    """The real daemon on catalog ``name``: its CPU over ``window`` seconds once settled."""
    label = common["database"]
    workdir = setting.base / f"idle-{label}"
    workdir.mkdir()
    # Past the second retention pass (60 s): the first may schedule or cancel on a catalog it
    # has never seen, and the second plans again once because of that; then it is idle.
    settle = env_float("TIERD_BENCH_IDLE_SETTLE", 75.0)
    profile_dir = os.environ.get("TIERD_BENCH_PROFILE_DIR")
    profile = Path(profile_dir).resolve() / f"retention-idle-{label}.prof" if profile_dir else None
    note(f"{label}: the daemon idles for {window:.0f} s after {settle:.0f} s to settle")
    config = _config(setting.base, store.url(name), dry_run=False)
    result = measure_idle(workdir, config, window=window, settle=settle, profile=profile)
    goal = IDLE_GOAL_SHARE * result.window
    emit(
        f"retention_idle_cpu_{label}",
        result.cpu,
        f"goal: under {IDLE_GOAL_SHARE:.1%} of one core over the window ({goal:.2f} CPU seconds)",
        goal,
        peak_rss=result.peak_rss_bytes,
        peak_rss_of="the daemon (VmHWM at the end of the window)",
        goal_met=result.share < IDLE_GOAL_SHARE,
        cpu_percent_of_core=round(100 * result.share, 3),
        cpu_user_seconds=round(result.user, 3),
        cpu_system_seconds=round(result.system, 3),
        window_seconds=round(result.window, 1),
        settle_seconds=result.settle,
        retention_interval_seconds=INTERVAL,
        catalog_state="every replica verified, or deleting with its 1 h delay still to run",
        daemon_log_warnings=result.warnings[:20],
        **common,
    )


def _bench_store(setting: _Setting, store: _Store, idle_window: float) -> None:
    """Build the template catalog, then every measurement on ``store``."""
    others, load_before = OtherLoad(), os.getloadavg()[0]
    store.drop("template")
    url = store.create("template")
    db = Database(url)
    upgrade(db)
    note(f"{store.label}: writing {setting.shape.checkpoints} checkpoints")
    built = fill_catalog(db, setting.shape, setting.now)
    note(f"{store.label}: catalog written in {built.seconds:.1f} s")
    gc.collect()
    gc.freeze()  # as the daemon does once started: long-lived objects out of the collector's sight
    common = {**setting.conditions(store, others, load_before), **describe_built(built)}
    config = Config(**_config(setting.base, url, dry_run=True))
    _parts(setting, db, config, common)
    _dry_run(setting, db, url, common)
    db.dispose()
    note(f"{store.label}: scheduling passes")
    name = _scheduling(setting, store, common)
    if idle_window > 0:
        _idle(setting, store, name, idle_window, setting.conditions(store, others, load_before))


def main() -> None:
    """Run every measurement on SQLite, then on PostgreSQL, and print the JSON lines."""
    configure_logging("warning", "json")
    small = quick()
    shape = Shape(runs=2, steps=100, files=10) if small else Shape()
    base = Path(tempfile.mkdtemp(prefix="tierd-bench-retention-", dir=bench_root()))
    setting = _Setting(
        base=base,
        shape=shape,
        now=datetime.now(UTC).replace(microsecond=0),
        rounds=env_int("TIERD_BENCH_ROUNDS", 1 if small else 5),
        schedule_rounds=env_int("TIERD_BENCH_RETENTION_SCHEDULE_ROUNDS", 1),
    )
    try:
        catalogs = base / "catalogs"
        catalogs.mkdir()
        window = env_float("TIERD_BENCH_IDLE_SECONDS", 10 if small else 120)
        _bench_store(setting, _SqliteStore(catalogs), window)
        if not pg_available():
            note("PostgreSQL is not installed: its measurements are skipped")
            return
        with postgres_server(bench_root()) as server:
            window = env_float("TIERD_BENCH_PG_IDLE_SECONDS", 10 if small else 60)
            _bench_store(setting, _PostgresStore(server), window)
    finally:
        shutdown_executor()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
