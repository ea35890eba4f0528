"""The catalog-wide gauges: read from the catalog at scrape time, exported by the leader alone.

Every daemon of a fleet reads the same catalog, so each would report the same totals and a
``sum()`` over the fleet would count them once per daemon. Only the daemon that leads at
the scrape exports them (a daemon alone always leads); the others export just
``tierd_catalog_up``, their own view of the catalog (a ``SELECT 1``). Around a change of
leader two daemons may export them for one scrape interval: ``max by (tier)`` is exact
throughout, ``sum`` off for that interval only.

``tierd_verified_bytes`` is what each tier stores (the usage report's bytes), and
``tierd_tier_storage_cost_per_month`` what that costs at the tier's ``price_per_gb_month``
(``tierd.daemon.usage``: per GiB a month), for the priced tiers only: no query of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import JobKind, JobState, ReplicaState
from tierd.daemon.catalog.peer_copies import newest_safe_created_at
from tierd.daemon.catalog.stats import ReplicaStats, WorkStats, replica_stats, work_stats
from tierd.daemon.usage import cost_per_month
from tierd.errors import CatalogError

__all__ = ["CatalogCollector", "FleetCollector", "TierPrice"]

_UNFINISHED = (JobState.QUEUED.value, JobState.RUNNING.value)


def _age(now: datetime, then: datetime) -> float:
    return (now - (then if then.tzinfo else then.replace(tzinfo=UTC))).total_seconds()


@dataclass(frozen=True)
class TierPrice:
    """A priced tier's ``price_per_gb_month`` and storage class (``default``: the store's own)."""

    per_gb_month: Decimal
    storage_class: str = "default"


class CatalogCollector(Collector):
    """``tierd_catalog_up`` on every daemon; the catalog-wide totals on the leader."""

    def __init__(
        self,
        db: Database,
        tiers: list[str],
        leads: Callable[[], bool],
        prices: Mapping[str, TierPrice] | None = None,
        shared: Sequence[str] = (),
    ) -> None:
        """``shared``: the shared tiers' names (a step verified there survives any node's loss)."""
        self.db = db
        self.tiers = tiers
        self.leads = leads
        self.prices = dict(prices or {})
        self.shared = list(shared)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the families (asked by the registry at each scrape)."""
        up = GaugeMetricFamily(
            "tierd_catalog_up", "Whether this daemon could read the catalog at this scrape"
        )
        try:
            families = self._read() if self.leads() else self._ping()
        except CatalogError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _ping(self) -> list[GaugeMetricFamily]:
        self.db.ping()
        return []

    def _read(self) -> list[GaugeMetricFamily]:
        now = datetime.now(UTC)
        stats = replica_stats(self.db)
        return [
            *self._replicas(now, stats),
            self._cost(stats),
            *self._work(now, work_stats(self.db)),
            self._node_loss(now),
        ]

    def _node_loss(self, now: datetime) -> GaugeMetricFamily:
        """The recovery point for "one node lost": absent while no recent step survives it."""
        family = GaugeMetricFamily(
            "tierd_node_loss_recovery_point_age_seconds",
            "Age of the newest complete checkpoint that survives the loss of any one node "
            "(every part verified on another node or on a shared tier)",
        )
        with self.db.read_session() as session:
            created = newest_safe_created_at(session, self.shared)
        if created is not None:
            family.add_metric([], _age(now, created))
        return family

    def _cost(self, stats: ReplicaStats) -> GaugeMetricFamily:
        cost = GaugeMetricFamily(
            "tierd_tier_storage_cost_per_month",
            "What the tier's verified bytes cost a month at its price_per_gb_month (per GiB)",
            labels=["tier", "storage_class"],
        )
        stored = {v.tier: v.total_bytes for v in stats.verified}
        for tier, price in self.prices.items():
            monthly = cost_per_month(stored.get(tier, 0), price.per_gb_month) or Decimal(0)
            cost.add_metric([tier, price.storage_class], float(monthly))
        return cost

    def _replicas(self, now: datetime, stats: ReplicaStats) -> list[GaugeMetricFamily]:
        replicas = GaugeMetricFamily("tierd_replicas", "Replicas by tier and state", labels=["tier", "state"])
        age = GaugeMetricFamily(
            "tierd_recovery_point_age_seconds",
            "Age of the newest checkpoint with a verified replica on the tier",
            labels=["tier"],
        )
        verified_bytes = GaugeMetricFamily(
            "tierd_verified_bytes", "Bytes of checkpoints verified on the tier", labels=["tier"]
        )
        for tier in self.tiers:
            for state in ReplicaState:
                replicas.add_metric([tier, state.value], stats.counts.get((tier, state.value), 0))
        for verified in stats.verified:
            if verified.newest_created_at is not None:
                age.add_metric([verified.tier], _age(now, verified.newest_created_at))
            verified_bytes.add_metric([verified.tier], float(verified.total_bytes))
        pinned = GaugeMetricFamily("tierd_checkpoints_pinned", "Checkpoints pinned (kept on every tier)")
        pinned.add_metric([], stats.pinned)
        held = GaugeMetricFamily("tierd_checkpoints_held", "Checkpoints under one or more legal holds")
        held.add_metric([], stats.held)
        return [replicas, age, verified_bytes, pinned, held]

    def _work(self, now: datetime, stats: WorkStats) -> list[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "tierd_jobs",
            "Jobs queued or running, by kind (copy, restore, delete) and destination tier",
            labels=["kind", "state", "tier"],
        )
        counts = dict.fromkeys(
            ((JobKind.COPY.value, state, tier) for state in _UNFINISHED for tier in self.tiers[1:]), 0
        )  # a copy queue that is empty shows 0, not nothing
        counts.update(stats.jobs)
        for (kind, state, tier), count in sorted(counts.items()):
            jobs.add_metric([kind, state, tier], count)
        waiting = GaugeMetricFamily(
            "tierd_checkpoints_waiting",
            "Steps announced or begun whose files or nodes' parts are still missing",
        )
        waiting.add_metric([], stats.waiting)
        oldest = GaugeMetricFamily(
            "tierd_oldest_waiting_checkpoint_age_seconds",
            "How long the step waiting longest has waited (0 when none waits)",
        )
        since = stats.oldest_waiting_since
        oldest.add_metric([], max(0.0, _age(now, since)) if since is not None else 0.0)
        return [jobs, waiting, oldest]


class FleetCollector(Collector):
    """``tierd_fleet_nodes{state}``, on the leader: nodes heard from within ``node_timeout`` or not."""

    def __init__(self, db: Database, node_timeout: float, leads: Callable[[], bool]) -> None:
        self.db = db
        self.node_timeout = node_timeout
        self.leads = leads

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the family (asked by the registry at each scrape)."""
        if not self.leads():
            return
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
