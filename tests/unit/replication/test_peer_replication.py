"""The replication service sending a node's part to real receivers (the API with a peer tier) on
their own loopback addresses: one full, one dead, one fine; a restart in the middle of a copy."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select, update
from structlog.testing import capture_logs

from tests.fixtures.net import free_port
from tests.fixtures.tmpfs import small_disk
from tests.fixtures.world import World, posix_tier
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.config import Config
from tierd.config.changes import config_changes
from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.client import PeerClient
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.fleet import register_node
from tierd.daemon.catalog.models import Checkpoint, File, Part, ReplicaState
from tierd.daemon.catalog.peer_copies import (
    copies_to_drop,
    mark_peer_copy,
    parts_to_send,
    peer_copies_of,
    reopen_copies,
    settle_copy,
)
from tierd.daemon.context import Context
from tierd.daemon.detect.detector import FileStat, Verdict
from tierd.daemon.detect.record import Outcome, record_checkpoint
from tierd.daemon.replication import ReplicationService
from tierd.daemon.transfer.retry import Backoff
from tierd.errors import ConfigError

TOKENS = [{"name": "peers", "token": "p-token", "role": "peer"}]
DEADLINE = 30.0


@dataclass
class Receiver:
    name: str
    peer_dir: Path
    url: str

    def holds(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.peer_dir)): p.read_bytes() for p in self.peer_dir.rglob("*") if p.is_file()
        }


async def _serve(
    tmp_path: Path, db: Database, name: str, index: int, **peer: object
) -> tuple[Receiver, ApiService | None]:
    """``name`` registered on 127.0.0.``index + 2`` with a peer tier; served unless it is node-d (dead)."""
    root = tmp_path / name
    host = f"127.0.0.{index + 2}"
    url = f"http://{host}:{free_port()}"
    api = None
    if name != "node-d":
        tier = {"name": "peers", "kind": "peer", "path": str(root / "peer"), **peer}
        world = World.make(root, db, [posix_tier(root, "nvme"), tier], api={"tokens": TOKENS})
        api = ApiService(create_app(world.service.ctx), host, 0)
        await api.start()
        url = f"http://{host}:{api.port}"
    with db.session() as s:
        register_node(s, name, version="t", pid=1, api=url, advertise_url=url, failure_domain=f"rack{index}")
    return Receiver(name, root / "peer", url), api


@pytest.fixture
async def receivers(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[list[Receiver]]:
    """node-b (full: its free_space mark is above the disk) and node-c (fine), served; node-d dead."""
    started: list[ApiService] = []
    found: list[Receiver] = []
    full = {"free_space": {"evict_below": "1000000TB", "evict_to": "1000001TB"}}
    for index, name in enumerate(("node-b", "node-c", "node-d")):
        receiver, api = await _serve(tmp_path, sqlite_db, name, index, **(full if name == "node-b" else {}))
        found.append(receiver)
        if api is not None:
            started.append(api)
    yield found
    for api in started:
        await api.stop(5)


def _sender(
    tmp_path: Path, db: Database, token: str | None = "p-token", poll: float = 0.1
) -> tuple[World, ReplicationService]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    peer: dict[str, object] = {"name": "peers", "kind": "peer", "path": str(tmp_path / "a-peer")}
    if token is not None:
        token_file = tmp_path / "peer.token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        peer["token_file"] = str(token_file)
    world = World.make(tmp_path, db, [posix_tier(tmp_path, "nvme"), peer], node="node-a")
    service = ReplicationService(
        Context(config=world.config, db=db),
        world.backends,
        ByteBudget(4 * 1024 * 1024),
        backoff=Backoff(0.01, 0.05),
        poll=poll,
    )
    return world, service


async def _part(world: World, step: int) -> tuple[int, int, dict[str, bytes]]:
    """A step on node-a's tier 0 recorded as node-a's part: (checkpoint id, part id, files)."""
    payload = {f"__{i}_0.distcp": os.urandom(3 * 1024 * 1024 + i) for i in range(3)}
    checkpoint_id = await world.add(step, on={"nvme": "verified"}, payload=payload)
    with world.db.session() as s:
        part = Part(checkpoint_id=checkpoint_id, node="node-a")
        s.add(part)
        s.flush()
        s.execute(update(File).where(File.checkpoint_id == checkpoint_id).values(part_id=part.id))
        relpaths = {
            f.relpath: f.relpath for f in s.scalars(select(File).where(File.checkpoint_id == checkpoint_id))
        }
        return checkpoint_id, part.id, {r: world.tier_path("nvme", r).read_bytes() for r in relpaths}


async def _until_verified(world: World, checkpoint_id: int) -> list[tuple[str, str, str]]:
    async with asyncio.timeout(DEADLINE):
        while True:
            with world.db.read_session() as s:
                copies = peer_copies_of(s, checkpoint_id)
            if any(state == "verified" for _, _, state in copies):
                return copies
            await asyncio.sleep(0.05)


async def test_a_part_goes_to_the_first_peer_on_its_ring_that_takes_it(
    tmp_path: Path, sqlite_db: Database, receivers: list[Receiver]
) -> None:
    full, fine, _ = receivers
    world, service = _sender(tmp_path / "node-a", sqlite_db)
    checkpoint_id, _, files = await _part(world, 3)
    with capture_logs() as logs:
        await service.start()
        try:
            copies = await _until_verified(world, checkpoint_id)
        finally:
            await service.stop(5)
    assert ("node-a", "node-c", "verified") in copies
    assert {holder for _, holder, state in copies if state != "verified"} <= {"node-b", "node-d"}
    assert fine.holds() == {f"node-a/{checkpoint_id}/{r}": data for r, data in files.items()}
    assert full.holds() == {}
    refused = {(e["peer"], e["status"]) for e in logs if e["event"] == "peer_refused"}
    tried = {holder for _, holder, _ in copies}
    assert refused == {p for p in {("node-b", 507), ("node-d", 0)} if p[0] in tried}


async def test_a_copy_cut_by_a_restart_is_made_again_whole(
    tmp_path: Path, sqlite_db: Database, receivers: list[Receiver]
) -> None:
    _, fine, _ = receivers
    world, service = _sender(tmp_path / "node-a", sqlite_db)
    checkpoint_id, part_id, files = await _part(world, 5)
    with sqlite_db.session() as s:  # the sender died while node-c was taking the part
        mark_peer_copy(s, part_id, "node-c", ReplicaState.COPYING)
    # and node-e was sending node-a a file when node-a died: its temporary file is left
    leftover = tmp_path / "node-a/a-peer/node-e/9/.__0_0.distcp.tierd-tmp-abc"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"partial")
    await service.start()
    assert not leftover.exists()
    try:
        copies = await _until_verified(world, checkpoint_id)
    finally:
        await service.stop(5)
    assert ("node-a", "node-c", "verified") in copies
    assert set(fine.holds()) >= {f"node-a/{checkpoint_id}/{r}" for r in files}


async def test_a_holder_that_never_held_anything_drops_nothing(receivers: list[Receiver]) -> None:
    """Its peer directory is made at the first file: before that a DELETE removes nothing (was 503)."""
    fine = receivers[1]
    client = PeerClient("p-token", ByteBudget(1 << 20))
    try:
        assert await client.drop(PeerNode(fine.name, fine.url), "node-a", 7) == 0
    finally:
        await client.close()


async def test_a_holder_slow_to_drop_its_failed_copy_holds_up_no_sending(
    tmp_path: Path, sqlite_db: Database, receivers: list[Receiver]
) -> None:
    """node-e, live in the catalog, takes connections and never answers: its failed copy's drop
    waits for its answer while the part goes to the others (the drop held the part back before)."""
    sockets: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sockets.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.5", 0)
    url = f"http://127.0.0.5:{server.sockets[0].getsockname()[1]}"
    with sqlite_db.session() as s:
        register_node(s, "node-e", version="t", pid=1, api=url, advertise_url=url, failure_domain="rack3")
    world, service = _sender(tmp_path / "node-a", sqlite_db)
    checkpoint_id, part_id, _ = await _part(world, 4)
    with sqlite_db.session() as s:
        mark_peer_copy(s, part_id, "node-e", ReplicaState.FAILED, "cut")
    async with server:
        await service.start()
        try:
            copies = await _until_verified(world, checkpoint_id)
        finally:
            await service.stop(5)
            for writer in sockets:
                writer.close()
    assert ("node-a", "node-c", "verified") in copies
    assert ("node-a", "node-e", "failed") in copies


async def _record(service: ReplicationService, step: int, names: dict[str, bytes], *, whole: bool) -> Outcome:
    """Write ``names`` on node-a's tier 0 and record them as its part of the step, as detection does."""
    ctx = service.ctx
    relpath = f"demo/step_{step}"
    stats = []
    for name, data in names.items():
        path = ctx.config.tier0.path / relpath / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        stats.append(FileStat(path, len(data), path.stat().st_mtime_ns))
    verdict = Verdict(whole, "test", tuple(stats), partial=not whole)
    outcome, _ = await record_checkpoint(
        ctx, verdict, run="demo", step=step, fmt="dcp", relpath=relpath, actor="test", action="detected"
    )
    return outcome


async def test_a_part_recorded_is_sent_at_once_before_its_step_completes(
    tmp_path: Path, sqlite_db: Database, receivers: list[Receiver]
) -> None:
    """With an hour between passes, recording node-a's part wakes one, and the part of a step
    still waiting for other nodes' parts goes; the marker landing beside it later is sent alone
    to the same holder (it keeps the shard it took), and the copy is verified again."""
    fine = receivers[1]
    world, service = _sender(tmp_path / "node-a", sqlite_db, poll=3600)
    shard = {"__0_0.distcp": os.urandom(3 * 1024 * 1024)}
    with capture_logs() as logs:
        await service.start()
        try:
            await service.loop.pass_done(0)
            assert await _record(service, 7, shard, whole=False) is Outcome.PART
            copies = await _until_verified(world, 1)
            assert ("node-a", "node-c", "verified") in copies
            assert await _record(service, 7, {**shard, ".metadata": b"meta"}, whole=True) is Outcome.COMPLETED
            async with asyncio.timeout(DEADLINE):
                while "node-a/1/demo/step_7/.metadata" not in fine.holds() or (
                    "node-a",
                    "node-c",
                    "verified",
                ) not in await asyncio.to_thread(_copies, sqlite_db, 1):
                    await asyncio.sleep(0.05)
        finally:
            await service.stop(5)
    assert fine.holds() == {
        f"node-a/1/demo/step_7/{name}": data for name, data in {**shard, ".metadata": b"meta"}.items()
    }
    sent = [
        (e["holder"], e["files"])
        for e in logs
        if e["event"] == "peer_copy_sending" and e["holder"] == "node-c"
    ]
    assert sent == [("node-c", 1), ("node-c", 1)]  # the shard, then the marker alone


async def test_a_part_whose_holder_is_written_off_goes_to_another_at_once(
    tmp_path: Path, sqlite_db: Database, receivers: list[Receiver]
) -> None:
    """With an hour between passes: the pass sends first, then writes off node-z's copy (no
    heartbeat) and wakes the next, which sends the part to node-c."""
    world, service = _sender(tmp_path / "node-a", sqlite_db, poll=3600)
    checkpoint_id, part_id, _ = await _part(world, 6)
    with sqlite_db.session() as s:
        mark_peer_copy(s, part_id, "node-z", ReplicaState.VERIFIED)
    await service.start()
    try:
        async with asyncio.timeout(DEADLINE):
            while ("node-a", "node-c", "verified") not in await asyncio.to_thread(
                _copies, sqlite_db, checkpoint_id
            ):
                await asyncio.sleep(0.05)
    finally:
        await service.stop(5)
    assert ("node-a", "node-z", "failed") in await asyncio.to_thread(_copies, sqlite_db, checkpoint_id)


async def test_the_peer_tiers_bandwidth_limit_is_reloaded(
    tmp_path: Path, sqlite_db: Database, receivers: list[Receiver]
) -> None:
    """A reload (``config_changes``, as SIGHUP runs it) sets, changes and lifts the cap the
    sends pay; the new ``retention.keep_last`` reaches the drops too."""
    world, service = _sender(tmp_path / "node-a", sqlite_db)
    assert service.bucket is None

    def reloaded(**peer: object) -> Config:
        data = world.config.model_dump(mode="json", exclude_unset=True)
        data["tiers"].insert(1, {**data.pop("peer"), **peer})  # where the file has it
        changes = config_changes(service.ctx.config, Config(**data))
        assert changes.need_restart == ()
        service.ctx.config = changes.config
        service.reconfigure(changes.config)
        return changes.config

    reloaded(bandwidth_limit="2MB")
    bucket = service.bucket
    assert bucket is not None
    assert bucket.rate == 2_000_000
    config = reloaded(bandwidth_limit="8MB", retention={"keep_last": 3})
    assert service.bucket is bucket
    assert bucket.rate == 8_000_000
    assert service.lifecycle is not None
    assert service.lifecycle.config is config
    checkpoint_id, _, _ = await _part(world, 8)
    await service.start()
    try:
        await _until_verified(world, checkpoint_id)  # 9 MiB at 8 MB/s: paced, and sent
    finally:
        await service.stop(5)
    reloaded(bandwidth_limit=None)
    assert service.bucket is None


async def test_a_waiting_steps_part_is_sent_and_its_copy_kept_until_newer_steps_complete(
    tmp_path: Path, sqlite_db: Database
) -> None:
    """``parts_to_send`` offers a part of a step still waiting for other nodes' parts, and
    ``copies_to_drop`` keeps its copy, until ``keep_last`` newer steps are complete."""
    world = World.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme")], node="node-a")
    _, part_id, _ = await _part(world, 2)
    with sqlite_db.session() as s:
        s.execute(update(Checkpoint).where(Checkpoint.step == 2).values(state="waiting"))
    with sqlite_db.read_session() as s:
        assert [p.part_id for p in parts_to_send(s, "node-a", 1, [], 1)] == [part_id]
    with sqlite_db.session() as s:
        mark_peer_copy(s, part_id, "node-c", ReplicaState.VERIFIED)
    with sqlite_db.read_session() as s:
        assert copies_to_drop(s, "node-a", [], 1) == []
    await world.add(3, on={"nvme": "verified"})  # a newer step, complete: the waiting one is abandoned
    with sqlite_db.read_session() as s:
        assert [(d.part_id, d.reason) for d in copies_to_drop(s, "node-a", [], 1)] == [(part_id, "retention")]


def _copies(db: Database, checkpoint_id: int) -> list[tuple[str, str, str]]:
    with db.read_session() as s:
        return peer_copies_of(s, checkpoint_id)


async def test_a_copy_of_a_part_that_grew_while_sent_is_not_verified(
    tmp_path: Path, sqlite_db: Database
) -> None:
    """``settle_copy`` with fewer files than the part holds now leaves the copy pending."""
    world = World.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme")], node="node-a")
    _, part_id, files = await _part(world, 2)
    with sqlite_db.session() as s:
        mark_peer_copy(s, part_id, "node-c", ReplicaState.COPYING)
    with sqlite_db.session() as s:
        assert not settle_copy(s, part_id, "node-c", len(files) - 1)
    with sqlite_db.session() as s:
        mark_peer_copy(s, part_id, "node-b", ReplicaState.COPYING)
        reopen_copies(s, part_id)  # the part grew after node-b's send began
    with sqlite_db.session() as s:
        assert not settle_copy(s, part_id, "node-b", len(files))
    with sqlite_db.read_session() as s:
        assert {(h, st) for _, h, st in peer_copies_of(s, 1)} == {
            ("node-b", "pending"),
            ("node-c", "pending"),
        }


async def test_without_a_token_file_the_node_only_receives(tmp_path: Path, sqlite_db: Database) -> None:
    world, service = _sender(tmp_path, sqlite_db, token=None)
    checkpoint_id, _, _ = await _part(world, 1)
    await service.start()
    await service.stop(5)
    assert service.sender is None
    with sqlite_db.read_session() as s:
        assert peer_copies_of(s, checkpoint_id) == []


def test_a_bad_token_file_is_named_by_its_key(tmp_path: Path, sqlite_db: Database) -> None:
    token_file = tmp_path / "peer.token"
    token_file.write_text("secret\n")
    token_file.chmod(0o644)
    peer = {"name": "peers", "kind": "peer", "path": str(tmp_path / "p"), "token_file": str(token_file)}
    world = World.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme"), peer])
    with pytest.raises(ConfigError) as caught:
        ReplicationService(Context(config=world.config, db=sqlite_db), world.backends, ByteBudget(1 << 20))
    assert "tiers.peers.token_file: every user may read it" in str(caught.value)


async def test_disk_pressure_evicts_held_copies_safe_elsewhere_first(
    tmp_path: Path, sqlite_db: Database
) -> None:
    """node-b holds node-a's parts of steps 1 and 2 on a 4 MiB tmpfs; step 2's is also on node-c."""
    mib = 1024 * 1024
    with small_disk(tmp_path / "peer", 4 * mib) as disk:
        peer = {
            "name": "peers",
            "kind": "peer",
            "path": str(disk.path),
            "free_space": {"evict_below": mib, "evict_to": 3 * mib // 2},
        }
        world = World.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme"), peer], node="node-b")
        held: dict[int, tuple[int, Path]] = {}
        for step in (1, 2):
            checkpoint_id, part_id, _ = await _part(world, step)
            where = disk.path / "node-a" / str(checkpoint_id) / "shard"
            where.parent.mkdir(parents=True)
            where.write_bytes(os.urandom(mib))
            with sqlite_db.session() as s:
                s.execute(update(Part).where(Part.id == part_id).values(total_bytes=mib))
                mark_peer_copy(s, part_id, "node-b", ReplicaState.VERIFIED)
                if step == 2:
                    mark_peer_copy(s, part_id, "node-c", ReplicaState.VERIFIED)
            held[step] = (checkpoint_id, where)
        disk.fill(leave=mib * 9 // 10)  # below evict_below: 0.6 MiB short of evict_to
        service = ReplicationService(
            Context(config=world.config, db=sqlite_db), world.backends, ByteBudget(1 << 20)
        )
        assert service.sender is None  # no token: it only receives, and still relieves pressure
        assert service.eviction is not None
        with capture_logs() as logs:
            assert await service.eviction.relieve() == 1
        await service.stop(1)
        assert held[1][1].exists()
        assert not held[2][1].exists()  # step 2 was safe on node-c too: it went first, alone
        with sqlite_db.read_session() as s:
            assert ("node-a", "node-b", "deleted") in peer_copies_of(s, held[2][0])
            assert ("node-a", "node-b", "verified") in peer_copies_of(s, held[1][0])
        assert [
            (e["checkpoint"], e["safe_elsewhere"]) for e in logs if e["event"] == "peer_copy_evicted"
        ] == [(held[2][0], True)]
