"""The fleet in the catalog: each daemon's heartbeat, the shared tiers' leader lease, the fleet's view.

Every time here is the database's clock (``now()`` on PostgreSQL, ``CURRENT_TIMESTAMP`` on
SQLite), never a node's: clock skew between nodes moves nothing. The lease is taken or
renewed by one conditional ``UPDATE`` (compare-and-set on its row): it changes hands only
when it is free or has expired by the database's clock, and its ``term`` then grows by one.
On PostgreSQL the lease's transaction sets a short ``lock_timeout`` (an elector never waits
long behind a paused one) and ``idle_in_transaction_session_timeout`` (a holder stopped
between its ``UPDATE`` and its ``COMMIT`` is cut off by the server, so its row lock goes).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, or_, select, text, type_coerce, update
from sqlalchemy.orm import Session

from tierd.daemon.catalog.dialect import insert_ignoring_duplicates, insert_or_update, is_postgresql
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    FleetLease,
    Job,
    JobState,
    Node,
    Part,
    PartReplica,
    ReplicaState,
    Run,
    UTCDateTime,
)

__all__ = [
    "SHARED_TIERS_LEASE",
    "LeaseState",
    "NodeJob",
    "NodePart",
    "NodeRow",
    "claim_lease",
    "database_now",
    "heartbeat",
    "lease_state",
    "list_nodes",
    "node_of",
    "parts_not_shared",
    "register_node",
    "release_lease",
    "unfinished_jobs",
]

_NODES = Node.metadata.tables[Node.__tablename__]
_LEASES = FleetLease.metadata.tables[FleetLease.__tablename__]

#: The lease whose holder deletes, evicts and scrubs on shared tiers.
SHARED_TIERS_LEASE = "shared-tiers"


@dataclass(frozen=True)
class LeaseState:
    """A lease as the database has it now: who holds it, its term, until when (database clock)."""

    holder: str | None
    term: int
    acquired_at: datetime | None
    expires_at: datetime | None
    db_now: datetime

    @property
    def live(self) -> bool:
        """Whether the lease is held and not expired."""
        return self.holder is not None and self.expires_at is not None and self.expires_at > self.db_now


@dataclass(frozen=True)
class NodeRow:
    """One daemon's row, with its heartbeat's age on the database's clock."""

    name: str
    version: str
    pid: int
    api: str
    started_at: datetime
    heartbeat_at: datetime
    age_seconds: float
    advertise_url: str | None = None
    failure_domain: str | None = None


@dataclass(frozen=True)
class NodeJob:
    """A job a node holds (running under its lease) or owes (queued from its node-local tier)."""

    id: int
    kind: str
    state: str
    checkpoint_id: int
    run: str
    step: int
    src_tier: str | None
    dst_tier: str | None
    owner: str | None


@dataclass(frozen=True)
class NodePart:
    """A node's part of a step not yet verified on the first shared tier (only that node has it)."""

    node: str
    checkpoint_id: int
    run: str
    step: int
    step_state: str
    files: int
    bytes: int
    state: str


def database_now(session: Session) -> datetime:
    """The database's clock now."""
    value: datetime = session.scalars(select(type_coerce(func.now(), UTCDateTime()))).one()
    return value


def register_node(
    session: Session,
    name: str,
    *,
    version: str,
    pid: int,
    api: str,
    advertise_url: str | None = None,
    failure_domain: str | None = None,
) -> None:
    """Insert or overwrite ``name``'s row (a restart of the node): started and heard from now.

    ``advertise_url`` and ``failure_domain``: its ``fleet`` settings, for its peers to read.
    """
    now = func.now()
    values = {
        "name": name,
        "version": version,
        "pid": pid,
        "api": api,
        "started_at": now,
        "heartbeat_at": now,
        "advertise_url": advertise_url,
        "failure_domain": failure_domain,
    }
    session.execute(insert_or_update(session, _NODES, ("name",), values))


def heartbeat(session: Session, name: str, pid: int, api: str) -> bool:
    """Mark ``name`` heard from now; False when its row is gone or another process took the name."""
    result = session.execute(
        update(Node)
        .where(Node.name == name, Node.pid == pid)
        .values(heartbeat_at=func.now(), api=api)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def claim_lease(session: Session, name: str, holder: str, seconds: float) -> LeaseState:
    """Take or renew lease ``name`` for ``holder`` until ``seconds`` from now (database clock).

    PostgreSQL only (on SQLite there is one daemon, which always leads).
    It is taken only when free, expired, or already ``holder``'s; the answer says who holds
    it afterwards. Commit the caller's transaction right away (it holds the row's lock).
    """
    _bound_waits(session, seconds)
    session.execute(insert_ignoring_duplicates(session, _LEASES).values(name=name, holder=None, term=0))
    now = func.now()
    mine = FleetLease.holder == holder
    session.execute(
        update(FleetLease)
        .where(FleetLease.name == name)
        .where(or_(mine, FleetLease.holder.is_(None), FleetLease.expires_at <= now))
        .values(
            term=case((mine, FleetLease.term), else_=FleetLease.term + 1),
            acquired_at=case((mine, FleetLease.acquired_at), else_=now),
            holder=holder,
            expires_at=now + timedelta(seconds=seconds),
        )
        .execution_options(synchronize_session=False)
    )
    return lease_state(session, name)


def release_lease(session: Session, name: str, holder: str) -> bool:
    """Give lease ``name`` up now if ``holder`` has it (an orderly stop); True when it did."""
    _bound_waits(session, 5.0)
    result = session.execute(
        update(FleetLease)
        .where(FleetLease.name == name, FleetLease.holder == holder)
        .values(holder=None, expires_at=func.now())
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def lease_state(session: Session, name: str) -> LeaseState:
    """Lease ``name`` now (free, with term 0, when it was never taken)."""
    row = session.execute(
        select(FleetLease.holder, FleetLease.term, FleetLease.acquired_at, FleetLease.expires_at).where(
            FleetLease.name == name
        )
    ).one_or_none()
    now = database_now(session)
    if row is None:
        return LeaseState(None, 0, None, None, now)
    return LeaseState(row.holder, row.term, row.acquired_at, row.expires_at, now)


def list_nodes(session: Session) -> list[NodeRow]:
    """Every node that ever heartbeated, by name, each with its heartbeat's age (database clock)."""
    now = database_now(session)
    rows = session.scalars(select(Node).order_by(Node.name))
    return [
        NodeRow(
            r.name,
            r.version,
            r.pid,
            r.api,
            r.started_at,
            r.heartbeat_at,
            (now - r.heartbeat_at).total_seconds(),
            r.advertise_url,
            r.failure_domain,
        )
        for r in rows
    ]


def unfinished_jobs(session: Session, node_local_tiers: Collection[str], limit: int = 1000) -> list[NodeJob]:
    """Jobs running under some node's lease, and queued copies out of a node-local tier.

    A queued copy from a node-local tier can only be taken by the node that wrote the
    checkpoint: its ``owner`` is that node's name (no pid); a running job's is ``node:pid``.
    """
    running = Job.state == JobState.RUNNING.value
    owes = (Job.state == JobState.QUEUED.value) & Job.src_tier.in_(list(node_local_tiers))
    query = (
        select(Job, Run.name, Checkpoint.step, func.coalesce(Part.node, Checkpoint.node))
        .join(Checkpoint, Checkpoint.id == Job.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .outerjoin(Part, Part.id == Job.part_id)  # a part's copy is owed by the part's node
        .where(or_(running, owes))
        .order_by(Job.id)
        .limit(limit)
    )
    out = []
    for job, run, step, node in session.execute(query):
        owner = job.lease_owner if job.state == JobState.RUNNING.value else (node or None)
        out.append(
            NodeJob(
                job.id, job.kind, job.state, job.checkpoint_id, run, step, job.src_tier, job.dst_tier, owner
            )
        )
    return out


def parts_not_shared(session: Session, shared_tier: str, limit: int = 1000) -> list[NodePart]:
    """Parts of live steps whose copy on ``shared_tier`` (the first shared tier) is not verified.

    Their bytes are on their node's node-local tier only: a silent node's are stuck there.
    """
    query = (
        select(Part.node, Part.checkpoint_id, Run.name, Checkpoint.step, Checkpoint.state, Part.file_count)
        .add_columns(Part.total_bytes, PartReplica.state)
        .join(Checkpoint, Checkpoint.id == Part.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .join(PartReplica, (PartReplica.part_id == Part.id) & (PartReplica.tier == shared_tier))
        .where(
            PartReplica.state != ReplicaState.VERIFIED.value,
            Checkpoint.state.in_([CheckpointState.WAITING.value, CheckpointState.COMPLETE.value]),
        )
        .order_by(Part.checkpoint_id, Part.node)
        .limit(limit)
    )
    return [NodePart(*row) for row in session.execute(query)]


def _bound_waits(session: Session, seconds: float) -> None:
    """On PostgreSQL, bound this transaction's waits to a quarter of the lease.

    A row lock is waited for that long at most, and the server ends the transaction when its
    client stops mid-way (paused, say) for that long.
    """
    if not is_postgresql(session):
        return
    ms = max(100, int(seconds * 1000 / 4))
    session.execute(text(f"SET LOCAL lock_timeout = {ms}"))
    session.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {ms}"))


def node_of(owner: str | None) -> str | None:
    """The node name of a lease owner ``node:pid`` (a bare node name stays as it is)."""
    if owner is None:
        return None
    name, colon, pid = owner.rpartition(":")
    return name if colon and pid.isdigit() else owner
