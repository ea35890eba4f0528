"""Each tier's space, disk pressure and scrub progress, read at scrape time.

A daemon reports a tier only while it acts on it (``Context.acts_on``): its own node-local
tiers always, the fleet's shared tiers only while it leads. So a shared tier's free bytes
come from one daemon, and ``sum()`` of a node-local tier's over the fleet is every node's
disk added up.

- space (``tierd_tier_{size,free,used}_bytes``): ``statvfs`` of each POSIX tier's root at
  every scrape, never older than the scrape. Each call runs in a thread of its own and is
  waited for at most ``SPACE_TIMEOUT`` (all tiers' calls together): a hung mount's tier is
  left out, and skipped at once by later scrapes until its call returns (node_exporter's
  stuck-mount rule). A scrape's cost is one ``statvfs`` per POSIX tier, and bounded.
- pressure (``tierd_tier_pressure_blocked``): what retention last found, for the POSIX tiers
  with ``free_space`` marks.
- scrub (``tierd_scrub_pass_replicas``, ``tierd_scrub_oldest_check_age_seconds``): one
  aggregate query per scrubbed tier (two on a node-local tier: its parts too), as
  ``/v1/tiers`` shows it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tierd.config import Config, PosixTier
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.scrub import ScrubProgress, scrub_progress
from tierd.errors import CatalogError

__all__ = ["SPACE_TIMEOUT", "SpaceReader", "TierCollector"]

#: The longest one scrape waits for the tiers' ``statvfs`` calls, all together.
SPACE_TIMEOUT = 1.0


@dataclass(frozen=True)
class _Space:
    total: int
    free: int


class SpaceReader:
    """``statvfs`` of tier roots, each call in a thread of its own, waited for with a bound."""

    def __init__(
        self, timeout: float = SPACE_TIMEOUT, stat: Callable[[Path], os.statvfs_result] = os.statvfs
    ):
        self.timeout = timeout
        self._stat = stat
        self._lock = threading.Lock()
        self._stuck: set[Path] = set()

    def read(self, roots: list[Path]) -> dict[Path, _Space]:
        """The space of each root whose call returned in time (a missing root: left out)."""
        found: dict[Path, _Space] = {}
        calls = [(root, self._start(root, found)) for root in roots]
        deadline = time.monotonic() + self.timeout
        for _root, done in calls:
            if done is not None:
                done.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            return dict(found)

    def stuck(self) -> set[Path]:
        """The roots whose last call has not returned yet."""
        with self._lock:
            return set(self._stuck)

    def _start(self, root: Path, found: dict[Path, _Space]) -> threading.Event | None:
        with self._lock:
            if root in self._stuck:
                return None
            self._stuck.add(root)
        done = threading.Event()
        threading.Thread(target=self._call, args=(root, found, done), name="statvfs", daemon=True).start()
        return done

    def _call(self, root: Path, found: dict[Path, _Space], done: threading.Event) -> None:
        try:
            st = self._stat(root)
        except OSError:
            st = None
        with self._lock:
            self._stuck.discard(root)
            if st is not None:
                found[root] = _Space(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)
        done.set()


@dataclass(frozen=True)
class _Scrubbed:
    name: str
    every: float
    shared: bool


class TierCollector(Collector):
    """The tiers' gauges, for the tiers this daemon acts on (see the module docstring)."""

    def __init__(
        self, db: Database, config: Config, acts_on: Callable[[str], bool], reader: SpaceReader | None = None
    ) -> None:
        self.db = db
        self.node = config.node
        self.acts_on = acts_on
        self.reader = reader or SpaceReader()
        posix = [t for t in config.tiers if isinstance(t, PosixTier)]
        self._roots = {t.name: t.path for t in posix}
        self._marked = [t.name for t in posix if t.free_space is not None]
        self._scrubbed = [_Scrubbed(t.name, t.scrub.every, t.shared) for t in config.tiers if t.scrub]
        self._blocked: set[str] = set()

    def set_blocked(self, tier: str, blocked: bool) -> None:
        """Retention's finding: the tier's disk pressure is stuck, or not."""
        if blocked:
            self._blocked.add(tier)
        else:
            self._blocked.discard(tier)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the families (asked by the registry at each scrape)."""
        yield from self._space()
        yield self._pressure()
        yield from self._scrub()

    def _space(self) -> list[GaugeMetricFamily]:
        size = GaugeMetricFamily("tierd_tier_size_bytes", "Size of the tier's file system", labels=["tier"])
        free = GaugeMetricFamily(
            "tierd_tier_free_bytes",
            "Free bytes on the tier's file system (for a non-root writer)",
            labels=["tier"],
        )
        used = GaugeMetricFamily(
            "tierd_tier_used_bytes", "Used bytes on the tier's file system", labels=["tier"]
        )
        roots = {name: root for name, root in self._roots.items() if self.acts_on(name)}
        spaces = self.reader.read(list(roots.values()))
        for name, root in roots.items():
            if (space := spaces.get(root)) is not None:
                size.add_metric([name], space.total)
                free.add_metric([name], space.free)
                used.add_metric([name], space.total - space.free)
        return [size, free, used]

    def _pressure(self) -> GaugeMetricFamily:
        blocked = GaugeMetricFamily(
            "tierd_tier_pressure_blocked",
            "1 while the tier is below its low mark and nothing more may be evicted",
            labels=["tier"],
        )
        for name in self._marked:
            if self.acts_on(name):
                blocked.add_metric([name], 1 if name in self._blocked else 0)
        return blocked

    def _scrub(self) -> list[GaugeMetricFamily]:
        checked = GaugeMetricFamily(
            "tierd_scrub_pass_replicas",
            "Verified replicas on the tier re-checked (or copied) within its scrub.every, or not yet",
            labels=["tier", "state"],
        )
        oldest = GaugeMetricFamily(
            "tierd_scrub_oldest_check_age_seconds",
            "How long ago the least recently checked verified replica on the tier was checked",
            labels=["tier"],
        )
        now = datetime.now(UTC)
        for tier in self._scrubbed:
            if not self.acts_on(tier.name):
                continue
            try:
                progress = self._progress(tier, now)
            except CatalogError:
                return []  # tierd_catalog_up says so
            checked.add_metric([tier.name, "checked"], progress.checked)
            checked.add_metric([tier.name, "unchecked"], progress.total - progress.checked)
            if progress.oldest_check is not None:
                oldest.add_metric([tier.name], (now - progress.oldest_check).total_seconds())
        return [checked, oldest]

    def _progress(self, tier: _Scrubbed, now: datetime) -> ScrubProgress:
        since = now - timedelta(seconds=tier.every)
        with self.db.read_session() as session:
            return scrub_progress(session, tier.name, since, node=None if tier.shared else self.node)
