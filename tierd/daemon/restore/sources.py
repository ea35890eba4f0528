"""Where a restore reads each file from: its sources nearest first, and which files each holds.

The order: the tier asked for (``source_tier``) first; then the node-local tiers with a
verified replica (tier 0, which on a node-local tier 0 holds only this node's part, and is
never read by a restore ``to: tier0`` that rewrites it); then the peers holding verified
copies of the step's parts (``peers``: same failure domain first, then rendezvous order);
then the shared tiers, nearest first, those whose objects sit in an archive storage class
after the readable ones. A file no source holds refuses the restore before a byte is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tierd.config import Config, PeerTier, TierConfig
from tierd.daemon.backends.base import Backend
from tierd.daemon.catalog.restores import RestorePlan
from tierd.daemon.restore.copier import archive_classes
from tierd.daemon.restore.destination import Layout
from tierd.daemon.restore.peers import PeerSources
from tierd.daemon.restore.source import Rebased
from tierd.daemon.transfer.throttle import TokenBucket
from tierd.errors import RestoreRefused

__all__ = ["Sources", "plan_sources"]


@dataclass(frozen=True)
class Sources:
    """A restore's sources, nearest first, with what each holds and pays."""

    backends: list[Backend]
    buckets: list[TokenBucket | None]  # each source's bandwidth cap
    #: Source name -> the only names (under the restore's root) it holds.
    partial: dict[str, frozenset[str]]
    concurrency: int
    #: The id of this node's part, when tier 0 holds only that part (None otherwise).
    tier0_part: int | None

    @property
    def first(self) -> str:
        """The nearest source's name."""
        return self.backends[0].name


def plan_sources(
    config: Config,
    plan: RestorePlan,
    layout: Layout,
    backends: Mapping[str, Backend],
    peers: PeerSources,
) -> Sources:
    """The sources of the restore ``plan`` (see the module docstring). Raises RestoreRefused."""
    tiers = _tiers(config, plan)
    partial = _tier0_partial(config, plan, layout, [t.name for t in tiers])
    if partial.get(config.tier0.name) == frozenset():  # none of the files: no source at all
        tiers, partial = [t for t in tiers if t.name != config.tier0.name], {}
    wanted = plan.claim.detail.get("source_tier")
    cut = next((i for i, t in enumerate(tiers) if t.shared and t.name != wanted), len(tiers))
    rebased: list[Backend] = [Rebased(backends[t.name], layout.prefix) for t in tiers]
    sources = [*rebased[:cut], *peers.sources, *rebased[cut:]]
    caps = [_bucket(t) for t in tiers]
    buckets = [*caps[:cut], *[_bucket(config.peer)] * len(peers.sources), *caps[cut:]]
    if not sources:
        raise RestoreRefused(f"checkpoint {plan.claim.checkpoint_id} has no verified replica to restore from")
    partial |= peers.partial
    _check_covered(plan, layout, [s.name for s in sources], partial)
    widths = [t.concurrency for t in tiers]
    if peers.sources:
        widths.append((config.peer or config.tier0).concurrency)
    return Sources(
        backends=sources,
        buckets=buckets,
        partial=partial,
        concurrency=max(widths),
        tier0_part=plan.local_part_id if config.tier0.name in partial else None,
    )


def _bucket(tier: TierConfig | PeerTier | None) -> TokenBucket | None:
    return TokenBucket(int(tier.bandwidth_limit)) if tier is not None and tier.bandwidth_limit else None


def _tiers(config: Config, plan: RestorePlan) -> list[TierConfig]:
    """The tiers with a verified replica to read from, the one asked for first, then nearest first."""
    tiers = [t for t in config.tiers if t.name in plan.verified_tiers]
    if plan.claim.detail.get("to_tier0"):
        tiers = [t for t in tiers if t.name != config.tier0.name]  # never read what is rewritten
    wanted, archived = plan.claim.detail.get("source_tier"), archive_classes(tiers)
    # stable: the asked-for tier first, then nearest first; archived tiers after readable ones
    tiers.sort(key=lambda t: (t.name != wanted, t.name in archived))
    return tiers


def _tier0_partial(
    config: Config, plan: RestorePlan, layout: Layout, tiers: list[str]
) -> dict[str, frozenset[str]]:
    """Tier 0's names when it holds only this node's part of the step (none: its copy is gone)."""
    tier0 = config.tier0.name
    if plan.local_part is None or tier0 not in tiers:
        return {}
    return {tier0: frozenset(layout.name_of(r) for r in plan.local_part if r in layout.names)}


def _check_covered(
    plan: RestorePlan, layout: Layout, sources: list[str], partial: Mapping[str, frozenset[str]]
) -> None:
    """Refuse (RestoreRefused) when some selected file is held by no source."""
    if any(name not in partial for name in sources):
        return  # a source holding every file
    held = frozenset().union(*partial.values())
    missing = sorted(name for name in (layout.name_of(r) for r in layout.names) if name not in held)
    if missing:
        raise RestoreRefused(
            f"checkpoint {plan.claim.checkpoint_id}: {len(missing)} files (first {missing[0]}) are"
            " other nodes' parts, on no shared tier verified yet nor on a peer that holds a verified copy"
        )
