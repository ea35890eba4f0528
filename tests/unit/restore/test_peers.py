"""Restoring from peers' copies of a step's parts (SQLite and PostgreSQL): the order of the sources
and the fallback on a bad byte or an absent holder.

Three nodes record a real DCP step in three parts on their own tier 0; no shared tier ever gets
it (the PFS hop is held back). Each part has a verified copy on both other nodes, kept in each
holder's peer directory as the peer tier keeps them (``<node>/<checkpoint>/<relpath>``), read
through a stand-in for ``PeerFetch.source`` (the real one, over HTTP, is driven end to end in
``tests/integration/test_peer_restore_daemon.py``).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from tests.fixtures.parts_fleet import node_context
from tests.unit.detect.fleet import dcp_across, reconcile, step_row
from tierd.config import PosixTier
from tierd.daemon.backends import Backend, make_backend
from tierd.daemon.backends.base import RangeReader
from tierd.daemon.backends.peer.choose import PeerNode, score
from tierd.daemon.backends.peer.fetch import PeerUnavailable
from tierd.daemon.catalog import restores
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.fleet import register_node
from tierd.daemon.catalog.jobs import owner_id
from tierd.daemon.catalog.models import AuditEvent, File, Part, Replica, ReplicaState, utcnow
from tierd.daemon.catalog.peer_copies import mark_peer_copy, peer_copies_of
from tierd.daemon.catalog.peer_reads import PeerHolding, verified_peer_copies
from tierd.daemon.context import Context
from tierd.daemon.restore.peers import holder_order
from tierd.daemon.restore.requests import RestoreRequest, request_restore
from tierd.daemon.restore.runner import RestoreOptions, RestoreRunner
from tierd.daemon.restore.source import Rebased
from tierd.daemon.transfer.retry import Backoff
from tierd.errors import Conflict, RestoreRefused

FAST = RestoreOptions(poll_interval=0.05, progress_interval=0.02, file_backoff=Backoff(0.0, 0.0))
DOMAINS = {"n0": "rackA", "n1": "rackA", "n2": "rackB"}


class Held(Rebased):
    """A holder's peer directory, named and read as ``PeerFetch.source`` reads it; remembers reads."""

    def __init__(self, directory: Path, holder: str, checkpoint_id: int, owners: Mapping[str, str]) -> None:
        inner = make_backend(PosixTier(name="held", kind="posix", path=directory))
        super().__init__(inner, "")
        self.name = f"peer:{holder}"
        self.where = {relpath: f"{node}/{checkpoint_id}/{relpath}" for relpath, node in owners.items()}
        self.read: set[str] = set()

    def _full(self, relpath: str) -> str:
        return self.where[relpath]

    async def open_reader(self, relpath: str) -> RangeReader:
        self.read.add(relpath.rsplit("/", 1)[-1])
        return await super().open_reader(relpath)

    async def read_whole(self, relpaths: Any, views: Any) -> Any:
        self.read.update(r.rsplit("/", 1)[-1] for r in relpaths)
        return await super().read_whole(relpaths, views)


class Away(Held):
    """A holder that does not answer."""

    async def open_reader(self, relpath: str) -> RangeReader:
        raise PeerUnavailable(f"{self.name}: ConnectError")

    async def read_whole(self, relpaths: Any, views: Any) -> Any:
        return [PeerUnavailable(f"{self.name}: ConnectError") for _ in relpaths]


class Peers:
    """The holders' directories, and the sources a restore opened over them."""

    def __init__(self, root: Path, away: frozenset[str] = frozenset()) -> None:
        self.root = root
        self.away = away
        self.opened: dict[str, Held] = {}

    def open(self, holder: PeerNode, checkpoint_id: int, owners: Mapping[str, str]) -> Backend:
        kind = Away if holder.name in self.away else Held
        self.opened[holder.name] = kind(self.root / holder.name, holder.name, checkpoint_id, owners)
        return self.opened[holder.name]


@pytest.fixture
async def fleet(db: Database, tmp_path: Path) -> tuple[list[Context], int]:
    """Three nodes, step 1 in their three parts, each part copied to both other nodes' peer dirs."""
    nodes = [node_context(db, tmp_path, f"n{i}", "0") for i in range(3)]
    dcp_across(tmp_path / "scratch", nodes, 1)
    for ctx in nodes:
        await reconcile(ctx)
    row = step_row(db, 1)
    assert row is not None
    assert row.state == "complete"
    with db.session() as session:
        for name, domain in DOMAINS.items():
            url = f"http://{name}.invalid:1"
            register_node(session, name, version="t", pid=1, api="", advertise_url=url, failure_domain=domain)
        files = session.execute(select(Part.id, Part.node, File.relpath).join(File, File.part_id == Part.id))
        for part_id, node, relpath in files.all():
            for holder in (n for n in DOMAINS if n != node):
                kept = tmp_path / "peers" / holder / node / str(row.id) / relpath
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(nodes[int(node[1])].config.tier0.path / relpath, kept)
                mark_peer_copy(session, part_id, holder, ReplicaState.VERIFIED)
    n1 = nodes[1]
    fleet_settings = n1.config.fleet.model_copy(update={"failure_domain": "rackA"})
    nodes[1] = Context(config=n1.config.model_copy(update={"fleet": fleet_settings}), db=db)
    return nodes, row.id


async def _restore(ctx: Context, peers: Peers, target: Path | None, **fields: Any) -> restores.RestoreRow:
    row = step_row(ctx.db, 1)
    assert row is not None
    request = RestoreRequest(checkpoint_id=row.id, target=None if target is None else str(target), **fields)
    job_id = request_restore(ctx.db, ctx.config, request, actor="test")
    owner = owner_id(ctx.config.node)
    claim = restores.claim_next_restore(ctx.db, owner, ctx.config.node, lease_seconds=60, now=utcnow())
    assert claim is not None
    backends = {t.name: make_backend(t) for t in ctx.config.tiers}
    runner = RestoreRunner(
        config=ctx.config,
        db=ctx.db,
        backends=backends,
        budget=None,
        owner=owner,
        claim=claim,
        options=FAST,
        wake_pipeline=lambda: None,
        peers=peers.open,
    )
    await runner.run()
    with ctx.db.read_session() as session:
        return restores.get_restore(session, job_id)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def _whole(nodes: list[Context]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for ctx in nodes:
        found |= _files(ctx.config.watch[0].path / "step_1")
    return found


def _copies(db: Database, checkpoint_id: int) -> dict[tuple[str, str], str]:
    with db.read_session() as session:
        return {(node, holder): state for node, holder, state in peer_copies_of(session, checkpoint_id)}


async def test_a_wiped_node_takes_its_part_from_the_nearest_peer_and_the_rest_from_their_holders(
    fleet: tuple[list[Context], int], tmp_path: Path
) -> None:
    nodes, checkpoint_id = fleet
    whole = _whole(nodes)
    own = set(_files(nodes[1].config.watch[0].path / "step_1"))
    shutil.rmtree(nodes[1].config.tier0.path / "demo")  # its NVMe replaced: tier 0 is empty
    peers = Peers(tmp_path / "peers")
    target = tmp_path / "restores" / "n1"
    restore = await _restore(nodes[1], peers, target)
    assert (restore.job.state, restore.job.last_error) == ("done", None)
    assert _files(target) == whole
    # n1's part: on n0 (its own rack) and n2: n0 first. The others: in n1's own peer directory.
    assert peers.opened["n0"].read == own
    assert peers.opened["n1"].read == set(whole) - own
    assert peers.opened["n2"].read == set()
    assert {(f["from_tier"], f["to_tier"]) for f in restore.job.detail["fallbacks"]} == {("nvme", "peer:n0")}
    assert set(_copies(nodes[1].db, checkpoint_id).values()) == {"verified"}


async def test_a_bad_peer_copy_falls_back_to_the_next_holder_and_is_marked_failed(
    fleet: tuple[list[Context], int], tmp_path: Path
) -> None:
    nodes, checkpoint_id = fleet
    whole = _whole(nodes)
    shard = next(p for p in (nodes[1].config.watch[0].path / "step_1").iterdir())
    relpath = f"demo/step_1/{shard.name}"
    kept = tmp_path / "peers" / "n0" / "n1" / str(checkpoint_id) / relpath
    data = bytearray(kept.read_bytes())
    data[len(data) // 2] ^= 0x01
    kept.write_bytes(bytes(data))
    shutil.rmtree(nodes[1].config.tier0.path / "demo")
    restore = await _restore(nodes[1], Peers(tmp_path / "peers"), None, to_tier0=True, files=[shard.name])
    assert restore.job.state == "done", restore.job.last_error
    assert _files(shard.parent) == {shard.name: whole[shard.name]}
    assert [(f["file"], f["from_tier"], f["to_tier"]) for f in restore.job.detail["fallbacks"]] == [
        (relpath, "peer:n0", "peer:n2")
    ]
    copies = _copies(nodes[1].db, checkpoint_id)
    assert copies.pop(("n1", "n0")) == "failed"
    assert set(copies.values()) == {"verified"}
    with nodes[1].db.read_session() as session:
        events = session.query(AuditEvent).filter(AuditEvent.action == "peer_copy_failed").all()
    assert [(e.detail["node"], e.detail["holder"]) for e in events] == [("n1", "n0")]


async def test_a_holder_that_does_not_answer_is_passed_over_and_its_copies_stay_verified(
    fleet: tuple[list[Context], int], tmp_path: Path
) -> None:
    nodes, checkpoint_id = fleet
    whole = _whole(nodes)
    own = set(_files(nodes[1].config.watch[0].path / "step_1"))
    shutil.rmtree(nodes[1].config.tier0.path / "demo")
    peers = Peers(tmp_path / "peers", away=frozenset({"n0"}))
    target = tmp_path / "restores" / "away"
    restore = await _restore(nodes[1], peers, target)
    assert restore.job.state == "done", restore.job.last_error
    assert _files(target) == whole
    assert peers.opened["n2"].read == own
    assert set(_copies(nodes[1].db, checkpoint_id).values()) == {"verified"}


async def test_with_no_copy_anywhere_a_restore_of_other_nodes_parts_is_refused(
    fleet: tuple[list[Context], int], tmp_path: Path
) -> None:
    nodes, checkpoint_id = fleet
    with nodes[1].db.session() as session:
        for holding in verified_peer_copies(session, checkpoint_id):
            mark_peer_copy(session, holding.part_id, holding.holder, ReplicaState.FAILED)
    target = tmp_path / "restores" / "refused"
    restore = await _restore(nodes[1], Peers(tmp_path / "peers"), target)
    assert restore.job.state == "failed"
    assert "nor on a peer that holds a verified copy" in (restore.job.last_error or "")
    assert not target.exists()


def _holding(holder: str, domain: str | None, age: float = 0.0) -> PeerHolding:
    return PeerHolding(1, "n9", holder, f"http://{holder}:1", domain, age, frozenset())


def test_holders_are_tried_this_node_first_then_its_domain_then_by_rendezvous_score_silent_last() -> None:
    others = [_holding(f"h{i}", "rackB") for i in range(6)]
    by_score = sorted((h.holder for h in others), key=lambda name: -score("7", name))
    holdings = [
        _holding("silent", "rackA", age=120.0),
        *others,
        _holding("near", "rackA"),
        _holding("me", "rackB"),
    ]
    order = holder_order(holdings, me="me", domain="rackA", key="7", silent_after=60.0)
    assert order == ["me", "near", *by_score, "silent"]


async def test_a_restore_by_node_name_takes_exactly_that_nodes_part(
    fleet: tuple[list[Context], int], tmp_path: Path
) -> None:
    nodes, _ = fleet
    theirs = _files(nodes[2].config.watch[0].path / "step_1")
    peers = Peers(tmp_path / "peers")
    target = tmp_path / "restores" / "n2-part"
    restore = await _restore(nodes[1], peers, target, node="n2")
    assert restore.job.state == "done", restore.job.last_error
    assert _files(target) == theirs  # n2's shard, not .metadata (n0's) nor n1's own
    assert restore.job.detail["part_of"] == "n2"
    with pytest.raises(RestoreRefused, match="node: 'n9' recorded no part of checkpoint"):
        await _restore(nodes[1], peers, tmp_path / "restores" / "n9", node="n9")


async def test_the_latest_restorable_step_counts_a_step_only_peers_hold(
    fleet: tuple[list[Context], int], tmp_path: Path
) -> None:
    """A node that comes back empty before any shared tier has the step still restores it by ``latest``."""
    nodes, checkpoint_id = fleet
    with nodes[1].db.session() as session:
        session.execute(update(Replica).where(Replica.checkpoint_id == checkpoint_id).values(state="deleted"))
        found = restores.resolve_checkpoint(session, checkpoint_id=None, run="demo", step=None, latest=True)
        assert found.id == checkpoint_id
        for holding in verified_peer_copies(session, checkpoint_id):
            mark_peer_copy(session, holding.part_id, holding.holder, ReplicaState.FAILED)
        with pytest.raises(Conflict, match="no complete checkpoint with a verified replica or peer copy"):
            restores.resolve_checkpoint(session, checkpoint_id=None, run="demo", step=None, latest=True)
