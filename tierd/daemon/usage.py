"""What ``GET /v1/usage`` and ``tierd usage`` show: what each tier holds and costs, and in 30 days.

Built here from the config's prices and the catalog's aggregates (``catalog.usage``); the route
only serialises it. Prices are per GiB (2**30 bytes, as AWS and Google bill a "GB") held for a
month, and per 1,000 requests, in whatever currency the config's prices are written in.

- **now**: the bytes of the checkpoints verified on each tier; storage cost = GiB x
  ``price_per_gb_month``; requests a month = the files of the steps the current cadence saves
  in 30 days (one write per file) plus, on a scrubbed tier, one read per stored file per
  ``scrub.every`` (restores are not counted: nobody can foresee them).
- **saved**: what retention finished deleting in the last 30 days (audit events ``deleted``, not
  an operator's ``api:`` deletions, not evictions), and that many GiB at the tier's price.
- **in 30 days** (``project``): per run that saved a step in the cadence window, steps a day =
  its steps in the window / the window's days (a run younger than the window: / its age, at
  least one day), each step the window's mean size, every step reaching every tier; a tier
  whose retention sets rules keeps at most keep_last + keep_best.n + keep_within's days of steps
  + the share of steps keep_every_steps keeps (the window's mean step gap / K, of all the run's
  steps there), at least one, and deletes the rest. Pins and holds are not counted; runs that
  saved nothing in the window stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from tierd.config import Config, TierConfig, TierRetention
from tierd.daemon.catalog import usage
from tierd.daemon.catalog.db import Session
from tierd.daemon.catalog.usage import Cadence, Stored

__all__ = [
    "GIB",
    "PROJECTION_DAYS",
    "ClassUsage",
    "RunUsage",
    "TierUsage",
    "Totals",
    "UsageView",
    "cost_per_month",
    "project",
    "usage_view",
]

GIB = 1 << 30
#: How far ahead the projection looks, and how far back the retention savings look.
PROJECTION_DAYS = 30
DAY = 86_400.0
_ZERO = Stored(0, 0, 0)


@dataclass(frozen=True)
class TierUsage:
    """One tier: what it holds, what that costs a month, what retention saved, and in 30 days."""

    name: str
    kind: str
    storage_class: str
    checkpoints: int
    files: int
    bytes: int
    price_per_gb_month: Decimal | None
    price_per_1000_writes: Decimal | None
    price_per_1000_reads: Decimal | None
    writes_per_month: int
    reads_per_month: int
    storage_cost_per_month: Decimal | None
    request_cost_per_month: Decimal | None
    cost_per_month: Decimal | None
    retention_deleted_checkpoints: int
    retention_deleted_bytes: int
    retention_saved_per_month: Decimal | None
    projected_bytes: int
    projected_cost_per_month: Decimal | None


@dataclass(frozen=True)
class ClassUsage:
    """The tiers of one storage class (``default``: the store's own) added up."""

    storage_class: str
    tiers: list[str]
    bytes: int
    cost_per_month: Decimal | None


@dataclass(frozen=True)
class RunUsage:
    """One run: bytes over every tier and per tier, and its cadence (None: no save in the window)."""

    run: str
    bytes: int
    tiers: dict[str, int]
    steps_per_day: float | None
    mean_step_bytes: int | None


@dataclass(frozen=True)
class Totals:
    """Every tier added up; costs over the priced tiers (``unpriced`` names the others)."""

    bytes: int
    cost_per_month: Decimal
    retention_deleted_bytes: int
    retention_saved_per_month: Decimal
    projected_bytes: int
    projected_cost_per_month: Decimal
    unpriced: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UsageView:
    """The whole report."""

    generated_at: datetime
    cadence_days: int
    projection_days: int
    tiers: list[TierUsage]
    storage_classes: list[ClassUsage]
    runs: list[RunUsage]
    runs_total: int
    totals: Totals


@dataclass(frozen=True)
class _Rate:
    """A run's cadence: steps a day, mean bytes and files per step, mean step-number gap."""

    steps_per_day: float
    step_bytes: float
    step_files: float
    step_gap: float | None


def _rate(c: Cadence, now: datetime, window_days: int) -> _Rate:
    age_days = (now - c.first_saved_at).total_seconds() / DAY
    days = max(1.0, min(float(window_days), age_days))
    gap = (c.last_step - c.first_step) / (c.steps - 1) if c.steps > 1 else None
    return _Rate(c.steps / days, c.bytes / c.steps, c.files / c.steps, gap or None)


def project(current: Stored, rate: _Rate, rules: TierRetention, days: int = PROJECTION_DAYS) -> int:
    """The bytes of one run on one tier ``days`` on (see the module docstring)."""
    new = rate.steps_per_day * days
    total = current.checkpoints + new
    kept = total
    if not rules.keeps_everything:
        bound = float((rules.keep_last or 0) + (rules.keep_best.n if rules.keep_best else 0))
        if rules.keep_within:
            bound += rate.steps_per_day * rules.keep_within / DAY
        if rules.keep_every_steps:
            every = rules.keep_every_steps
            bound += total * min(1.0, (rate.step_gap or every) / every)
        kept = min(total, max(bound, 1.0))
    return max(0, round(current.bytes + (kept - current.checkpoints) * rate.step_bytes))


def _gib_cost(size: int, price: Decimal | None) -> Decimal | None:
    return None if price is None else Decimal(size) / GIB * price


def _requests_cost(writes: int, reads: int, tier: TierConfig) -> Decimal | None:
    if tier.price_per_1000_writes is None and tier.price_per_1000_reads is None:
        return None
    cost = Decimal(0)
    if tier.price_per_1000_writes is not None:
        cost += Decimal(writes) / 1000 * tier.price_per_1000_writes
    if tier.price_per_1000_reads is not None:
        cost += Decimal(reads) / 1000 * tier.price_per_1000_reads
    return cost


def _sum(*costs: Decimal | None) -> Decimal | None:
    known = [c for c in costs if c is not None]
    return sum(known, Decimal(0)) if known else None


@dataclass(frozen=True)
class _Read:
    """What the view reads from the catalog, in one transaction."""

    stored: dict[str, Stored]
    active: dict[tuple[str, str], Stored]
    deleted: dict[str, Stored]
    rates: dict[str, _Rate]
    runs: dict[str, dict[str, int]]
    runs_total: int


def _read(session: Session, now: datetime, cadence_days: int, runs: int) -> _Read:
    since = now - timedelta(days=cadence_days)
    return _Read(
        stored=usage.stored_by_tier(session),
        active=usage.stored_by_tier_and_run(session, since),
        deleted=usage.retention_deleted(session, now - timedelta(days=PROJECTION_DAYS)),
        rates={c.run: _rate(c, now, cadence_days) for c in usage.cadence(session, since)},
        runs=usage.top_runs(session, runs),
        runs_total=usage.run_count(session),
    )


def _tier(tier: TierConfig, read: _Read) -> TierUsage:
    stored = read.stored.get(tier.name, _ZERO)
    deleted = read.deleted.get(tier.name, _ZERO)
    rates = read.rates.items()
    writes = round(sum(r.steps_per_day * PROJECTION_DAYS * r.step_files for _run, r in rates))
    reads = round(stored.files * PROJECTION_DAYS * DAY / tier.scrub.every) if tier.scrub else 0
    projected = stored.bytes
    for run, rate in rates:
        current = read.active.get((tier.name, run), _ZERO)
        projected += project(current, rate, tier.retention) - current.bytes
    storage = _gib_cost(stored.bytes, tier.price_per_gb_month)
    requests = _requests_cost(writes, reads, tier)
    return TierUsage(
        name=tier.name,
        kind=tier.kind,
        storage_class=getattr(tier, "storage_class", None) or "default",
        checkpoints=stored.checkpoints,
        files=stored.files,
        bytes=stored.bytes,
        price_per_gb_month=tier.price_per_gb_month,
        price_per_1000_writes=tier.price_per_1000_writes,
        price_per_1000_reads=tier.price_per_1000_reads,
        writes_per_month=writes,
        reads_per_month=reads,
        storage_cost_per_month=storage,
        request_cost_per_month=requests,
        cost_per_month=_sum(storage, requests),
        retention_deleted_checkpoints=deleted.checkpoints,
        retention_deleted_bytes=deleted.bytes,
        retention_saved_per_month=_gib_cost(deleted.bytes, tier.price_per_gb_month),
        projected_bytes=projected,
        projected_cost_per_month=_sum(_gib_cost(projected, tier.price_per_gb_month), requests),
    )


def _classes(tiers: list[TierUsage]) -> list[ClassUsage]:
    names = sorted({t.storage_class for t in tiers})
    grouped = [(name, [t for t in tiers if t.storage_class == name]) for name in names]
    return [
        ClassUsage(
            storage_class=name,
            tiers=[t.name for t in members],
            bytes=sum(t.bytes for t in members),
            cost_per_month=_sum(*(t.storage_cost_per_month for t in members)),
        )
        for name, members in grouped
    ]


def _totals(tiers: list[TierUsage]) -> Totals:
    zero = Decimal(0)
    return Totals(
        bytes=sum(t.bytes for t in tiers),
        cost_per_month=sum((t.cost_per_month or zero for t in tiers), zero),
        retention_deleted_bytes=sum(t.retention_deleted_bytes for t in tiers),
        retention_saved_per_month=sum((t.retention_saved_per_month or zero for t in tiers), zero),
        projected_bytes=sum(t.projected_bytes for t in tiers),
        projected_cost_per_month=sum((t.projected_cost_per_month or zero for t in tiers), zero),
        unpriced=[t.name for t in tiers if t.cost_per_month is None],
    )


def _runs(read: _Read) -> list[RunUsage]:
    shown = []
    for run, tiers in read.runs.items():
        rate = read.rates.get(run)
        shown.append(
            RunUsage(
                run=run,
                bytes=sum(tiers.values()),
                tiers=tiers,
                steps_per_day=None if rate is None else rate.steps_per_day,
                mean_step_bytes=None if rate is None else round(rate.step_bytes),
            )
        )
    return shown


def usage_view(session: Session, config: Config, now: datetime, *, cadence_days: int, runs: int) -> UsageView:
    """The report at ``now``: the cadence over ``cadence_days``, the ``runs`` biggest runs listed.

    Raises CatalogError when the catalog cannot be read.
    """
    read = _read(session, now, cadence_days, runs)
    tiers = [_tier(t, read) for t in config.tiers]
    return UsageView(
        generated_at=now,
        cadence_days=cadence_days,
        projection_days=PROJECTION_DAYS,
        tiers=tiers,
        storage_classes=_classes(tiers),
        runs=_runs(read),
        runs_total=read.runs_total,
        totals=_totals(tiers),
    )


def cost_per_month(stored_bytes: int, price: Decimal | None) -> Decimal | None:
    """What ``stored_bytes`` cost a month at ``price`` per GiB (None when the tier is not priced)."""
    return _gib_cost(stored_bytes, price)
