"""``Metrics``: one daemon's registry and the counters its services bump.

Names follow the conventions: prefix ``tierd_``, base units, counters end in ``_total``,
labels bounded (``tier``, ``state``, ``result``, ``reason``, ``format``) — never a path or a
step. Every counter's children for the configured tiers and known reasons exist from the
start at 0, so ``increase()`` sees a first failure and a dashboard shows 0 rather than
nothing. No ``*_created`` series (one more per child, which nobody reads), and the process's
own metrics (``process_*``, ``python_info``).

Who exports what, so that ``sum()`` over a fleet counts each thing once: counters, the
process, build and catalog reachability are each daemon's own; a tier's space, disk
pressure and scrub progress come from the daemon that acts on the tier (its own node-local
tiers; shared tiers only while it leads: ``tiers``); the catalog-wide totals come from the
leader alone (``fleetwide``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from tierd.config import Config
from tierd.daemon.backends.peer.client import REFUSAL_REASONS
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.replica_deletions import Origin
from tierd.daemon.metrics.build import build_info
from tierd.daemon.metrics.fleetwide import CatalogCollector, FleetCollector, TierPrice
from tierd.daemon.metrics.tiers import TierCollector
from tierd.daemon.transfer.recheck import CheckResult
from tierd.daemon.transfer.retry import FAILURE_REASONS

__all__ = ["DELETION_REFUSALS", "TRANSFER_RESULTS", "Metrics"]

#: How a hop ends, as ``tierd_transfers_total`` counts it (``retry``: failed, tried again later).
TRANSFER_RESULTS = ("verified", "failed", "retry", "cancelled")
#: Why a deletion was refused right before it ran, as ``tierd_deletions_refused_total`` counts it.
DELETION_REFUSALS = ("pinned", "held", "recheck_failed", "no_durable_copy")


def _always() -> bool:
    return True


def _everywhere(tier: str) -> bool:
    return True


class Metrics:
    """One daemon's metrics, on a registry of their own (so tests can build many).

    ``leads`` says whether this daemon leads its fleet now and ``acts_on`` whether it acts
    on a tier now (both asked at each scrape; a daemon alone does both always).
    """

    def __init__(
        self,
        db: Database,
        config: Config,
        *,
        leads: Callable[[], bool] = _always,
        acts_on: Callable[[str], bool] = _everywhere,
    ) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide, read at each scrape
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        build_info(self.registry)
        self._leads = leads
        tiers = [tier.name for tier in config.tiers]
        self.detected = Counter(
            "tierd_checkpoints_detected_total",
            "Checkpoint steps recorded complete",
            ["format"],
            registry=self.registry,
        )
        self._transfer_metrics(tiers)
        self._deletion_metrics(tiers)
        self._scrub_metrics(tiers)
        self.peer_refusals = Counter(
            "tierd_peer_refusals_total",
            "Files a peer did not take from this node (full, busy, forbidden, dead, mismatch, other)",
            ["reason"],
            registry=self.registry,
        )
        for refusal in REFUSAL_REASONS:
            self.peer_refusals.labels(refusal)
        self.fleet_leader = Gauge(
            "tierd_fleet_leader",
            "1 while this daemon leads the fleet's shared tiers (deletes, evicts, scrubs on them)",
            registry=self.registry,
        )
        shared = [tier.name for tier in config.tiers if tier.shared]
        self._catalog = CatalogCollector(db, tiers, leads, _prices(config), shared)
        self.registry.register(self._catalog)
        self.tiers = TierCollector(db, config, acts_on)
        self.registry.register(self.tiers)

    def _transfer_metrics(self, tiers: list[str]) -> None:
        """Hops: bytes, results, failures, durations."""
        self.transfer_bytes = Counter(
            "tierd_transfer_bytes_total", "Bytes written into a tier", ["tier"], registry=self.registry
        )
        self.transfers = Counter(
            "tierd_transfers_total",
            "Checkpoint hops finished, by result (verified, failed, retry, cancelled)",
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
        for tier in tiers:
            self.transfer_bytes.labels(tier)
            self.transfer_seconds.labels(tier)
            for result in TRANSFER_RESULTS:
                self.transfers.labels(tier, result)
            for reason in FAILURE_REASONS:
                self.transfer_failures.labels(tier, reason)

    def _deletion_metrics(self, tiers: list[str]) -> None:
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
        for tier in tiers:
            self.evictions.labels(tier)
            self.deletion_failures.labels(tier)
            self.reverify_failures.labels(tier)
            for origin in Origin:
                self.deletions.labels(tier, origin.value)
            for refusal in DELETION_REFUSALS:
                self.deletions_refused.labels(tier, refusal)

    def _scrub_metrics(self, tiers: list[str]) -> None:
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
        for tier in tiers:
            self.scrub_bytes.labels(tier)
            self.scrub_mismatches.labels(tier)
            for result in get_args(CheckResult):
                if result != "skipped":  # a verify call's answer for a tier it did not check
                    self.scrub_replicas.labels(tier, result)

    def reprice(self, config: Config) -> None:
        """Take the tiers' prices of a reloaded ``config`` (the next scrape's cost gauges)."""
        self._catalog.prices = _prices(config)

    def tier_pressure(self, tier: str, *, blocked: bool) -> None:
        """Record whether the tier's disk pressure is stuck (``tierd_tier_pressure_blocked``)."""
        self.tiers.set_blocked(tier, blocked)

    def count_fleet_nodes(self, db: Database, node_timeout: float) -> None:
        """Report ``tierd_fleet_nodes{state}`` (live, silent) from the catalog on the leader, per scrape."""
        self.registry.register(FleetCollector(db, node_timeout, self._leads))


def _prices(config: Config) -> dict[str, TierPrice]:
    """Each priced tier's price a GiB-month and storage class."""
    return {
        t.name: TierPrice(t.price_per_gb_month, getattr(t, "storage_class", None) or "default")
        for t in config.tiers
        if t.price_per_gb_month is not None
    }
