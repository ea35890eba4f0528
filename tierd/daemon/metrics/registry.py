"""Prometheus metrics: counters the services bump, and gauges read from the catalog at scrape.

Names follow the conventions: prefix ``tierd_``, base units, counters end in ``_total``,
labels bounded (``tier``, ``state``, ``result``, ``format``) — never a path or a step.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tierd import __version__
from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import ReplicaState
from tierd.daemon.catalog.stats import replica_stats
from tierd.errors import CatalogError

__all__ = ["Metrics"]


class Metrics:
    """One daemon's metrics, on a registry of their own (so tests can build many)."""

    def __init__(self, db: Database, tiers: list[str]) -> None:
        self.registry = CollectorRegistry()
        build = Gauge("tierd_build_info", "tierd build", ["version"], registry=self.registry)
        build.labels(__version__).set(1)
        self.detected = Counter(
            "tierd_checkpoints_detected_total",
            "Checkpoint steps recorded complete",
            ["format"],
            registry=self.registry,
        )
        self._transfer_metrics()
        self._deletion_metrics()
        self._scrub_metrics()
        self._tier_metrics()
        self.registry.register(_CatalogCollector(db, tiers))

    def _transfer_metrics(self) -> None:
        """Hops: bytes, results, failures, durations."""
        self.transfer_bytes = Counter(
            "tierd_transfer_bytes_total", "Bytes written into a tier", ["tier"], registry=self.registry
        )
        self.transfers = Counter(
            "tierd_transfers_total",
            "Checkpoint hops finished, by result (verified, failed, cancelled)",
            ["tier", "result"],
            registry=self.registry,
        )
        self.transfer_failures = Counter(
            "tierd_transfer_failures_total",
            "Checkpoint hops that failed, by reason (no_space, integrity, permanent, retryable)",
            ["tier", "reason"],
            registry=self.registry,
        )
        self.transfer_seconds = Histogram(
            "tierd_transfer_seconds",
            "Time to copy and verify one checkpoint into a tier",
            ["tier"],
            buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600),
            registry=self.registry,
        )

    def _deletion_metrics(self) -> None:
        """Deletions and evictions: done, refused, failed, re-checks."""
        self.deletions = Counter(
            "tierd_deletions_total",
            "Replicas deleted, by tier and origin (retention, eviction, api)",
            ["tier", "reason"],
            registry=self.registry,
        )
        self.evictions = Counter(
            "tierd_evictions_total", "Replicas evicted under disk pressure", ["tier"], registry=self.registry
        )
        self.deletions_refused = Counter(
            "tierd_deletions_refused_total",
            "Deletions refused right before they ran (pinned, held, re-check failed, no durable copy)",
            ["tier", "reason"],
            registry=self.registry,
        )
        self.deletion_failures = Counter(
            "tierd_deletion_failures_total",
            "Deletions the tier failed (retried on the next pass)",
            ["tier"],
            registry=self.registry,
        )
        self.reverify_failures = Counter(
            "tierd_reverify_failures_total",
            "Durable copies whose re-check before a delete found bad or missing bytes",
            ["tier"],
            registry=self.registry,
        )

    def _scrub_metrics(self) -> None:
        """The scrubber's re-checks."""
        self.scrub_bytes = Counter(
            "tierd_scrub_bytes_total",
            "Bytes of replicas re-checked by the scrubber or a verify call",
            ["tier"],
            registry=self.registry,
        )
        self.scrub_replicas = Counter(
            "tierd_scrub_replicas_total",
            "Replicas re-checked, by result (ok, mismatch, missing, inconclusive, gone)",
            ["tier", "result"],
            registry=self.registry,
        )
        self.scrub_mismatches = Counter(
            "tierd_scrub_mismatches_total",
            "Files a re-check found missing or not matching their checksum",
            ["tier"],
            registry=self.registry,
        )

    def _tier_metrics(self) -> None:
        """Each tier's space and pressure, and the fleet's leadership."""
        self.tier_free_bytes = Gauge(
            "tierd_tier_free_bytes", "Free bytes on the tier's file system", ["tier"], registry=self.registry
        )
        self.tier_used_bytes = Gauge(
            "tierd_tier_used_bytes", "Used bytes on the tier's file system", ["tier"], registry=self.registry
        )
        self.tier_size_bytes = Gauge(
            "tierd_tier_size_bytes", "Size of the tier's file system", ["tier"], registry=self.registry
        )
        self.pressure_blocked = Gauge(
            "tierd_tier_pressure_blocked",
            "1 while the tier is below its low mark and nothing more may be evicted",
            ["tier"],
            registry=self.registry,
        )
        self.fleet_leader = Gauge(
            "tierd_fleet_leader",
            "1 while this daemon leads the fleet's shared tiers (deletes, evicts, scrubs on them)",
            registry=self.registry,
        )

    def count_fleet_nodes(self, db: Database, node_timeout: float) -> None:
        """Report ``tierd_fleet_nodes{state}`` (live, silent) from the catalog at each scrape."""
        self.registry.register(_FleetCollector(db, node_timeout))


class _CatalogCollector(Collector):
    """Gauges computed from the catalog at scrape time (so every node reports the same truth)."""

    def __init__(self, db: Database, tiers: list[str]) -> None:
        self.db = db
        self.tiers = tiers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("tierd_catalog_up", "Whether the last scrape could read the catalog")
        try:
            families = self._read()
        except CatalogError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _read(self) -> list[GaugeMetricFamily]:
        replicas = GaugeMetricFamily("tierd_replicas", "Replicas by tier and state", labels=["tier", "state"])
        age = GaugeMetricFamily(
            "tierd_recovery_point_age_seconds",
            "Age of the newest checkpoint with a verified replica on the tier",
            labels=["tier"],
        )
        verified_bytes = GaugeMetricFamily(
            "tierd_verified_bytes", "Bytes of checkpoints verified on the tier", labels=["tier"]
        )
        now = datetime.now(UTC)
        stats = replica_stats(self.db)
        for tier in self.tiers:
            for state in ReplicaState:
                replicas.add_metric([tier, state.value], stats.counts.get((tier, state.value), 0))
        for verified in stats.verified:
            created = verified.newest_created_at
            if created is not None:
                created = created if created.tzinfo else created.replace(tzinfo=UTC)
                age.add_metric([verified.tier], (now - created).total_seconds())
            verified_bytes.add_metric([verified.tier], float(verified.total_bytes))
        pinned = GaugeMetricFamily("tierd_checkpoints_pinned", "Checkpoints pinned (kept on every tier)")
        pinned.add_metric([], stats.pinned)
        held = GaugeMetricFamily("tierd_checkpoints_held", "Checkpoints under one or more legal holds")
        held.add_metric([], stats.held)
        return [replicas, age, verified_bytes, pinned, held]


class _FleetCollector(Collector):
    """``tierd_fleet_nodes{state}``: nodes heard from within ``node_timeout`` (database clock) or not."""

    def __init__(self, db: Database, node_timeout: float) -> None:
        self.db = db
        self.node_timeout = node_timeout

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            with self.db.read_session() as session:
                nodes = fleet.list_nodes(session)
        except CatalogError:
            return
        family = GaugeMetricFamily("tierd_fleet_nodes", "Daemons of the fleet by state", labels=["state"])
        silent = sum(1 for n in nodes if n.age_seconds > self.node_timeout)
        family.add_metric(["live"], len(nodes) - silent)
        family.add_metric(["silent"], silent)
        yield family
