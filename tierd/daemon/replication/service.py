"""The peer replication service: this node's parts of each step, copied to other nodes' peer tiers.

It runs when the config has a ``kind: peer`` tier with a ``token_file`` (the ``peer`` token
this node sends with; read at start, a problem named by its key). A pass (``PassLoop``:
woken when a part is recorded, else every ``POLL_SECONDS``) asks the catalog which of this
node's parts of complete steps still lack ``replicas`` verified copies on other nodes
(``parts_to_send``: newest first; not those a shared tier already holds, nor steps the peer
tier's ``retention.keep_last`` would drop) and which nodes are live (a heartbeat within
``fleet.node_timeout`` and an ``advertise_url``), then sends each part in a task of its own
(``sender.PartSender``); before that, copies whose holder died are written off and those
their holders should no longer keep are dropped (``lifecycle``). A part no peer took is
tried again after the pipeline's job backoff (``JOB_BACKOFF``). The chain's next hop does
not wait for any of it: the pipeline reads tier 0 on its own.

Each pass first relieves disk pressure on the peer directory (``eviction``: held copies go,
those safe elsewhere first), on a node that only receives too. At start, copies this node
was making when it stopped are recorded ``failed`` and made again (``interrupt_copies``),
and the temporary files a crash left in this node's own peer directory (a sender cut off
mid-file) are removed. At stop, sending stops at once: an unfinished copy is ``failed`` (or
left ``copying``, made again at the next start), never ``verified``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from tierd.config import Config, PeerTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend, ByteBudget
from tierd.daemon.backends.peer import PeerStore
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.client import PeerClient
from tierd.daemon.catalog.fleet import list_nodes
from tierd.daemon.catalog.peer_copies import PartToSend, interrupt_copies, parts_to_send
from tierd.daemon.context import Context
from tierd.daemon.outage import CatalogOutage
from tierd.daemon.replication.eviction import PeerEviction, check_marks
from tierd.daemon.replication.lifecycle import Lifecycle
from tierd.daemon.replication.sender import PartSender
from tierd.daemon.service import InFlight, PassLoop
from tierd.daemon.transfer.retry import JOB_BACKOFF, Backoff
from tierd.daemon.transfer.throttle import TokenBucket, retuned
from tierd.errors import TierdError
from tierd.keyring import peer_token
from tierd.logs import get_logger

__all__ = ["POLL_SECONDS", "ReplicationService"]

log = get_logger(__name__)

#: Seconds between passes nobody woke (a part recorded wakes one at once).
POLL_SECONDS = 10.0


class ReplicationService:
    """Sends this node's parts to its peers (see the module docstring)."""

    name = "replication"

    def __init__(
        self,
        ctx: Context,
        backends: Mapping[str, Backend],
        budget: ByteBudget,
        *,
        backoff: Backoff = JOB_BACKOFF,
        poll: float = POLL_SECONDS,
    ) -> None:
        """Over the daemon's tier-0 backend and buffer budget.

        Raises ConfigError: the token file, or a peer directory relieved after tier 0 (``check_marks``).
        """
        self.ctx = ctx
        self.tier = ctx.config.peer
        check_marks(ctx.config)
        self.backoff = backoff
        #: The peer tier's bandwidth limit, shared by every send (None: none).
        self.bucket: TokenBucket | None = None
        token = peer_token(self.tier)
        self.client: PeerClient | None = None
        self.sender: PartSender | None = None
        if self.tier is not None and token is not None:
            self.client = self._client(self.tier, token, budget)
            slots = asyncio.Semaphore(self.tier.concurrency)
            first, *rest = ctx.config.tiers
            own = [backends[first.name], *(backends[t.name] for t in rest if not t.shared)]
            self.sender = PartSender(ctx.db, self.me, own, self.client, self.tier.replicas, slots)
        self.tasks = InFlight(self.name)
        self._sending: set[int] = set()  # parts a task sends
        self.lifecycle = None
        if self.client is not None:
            self.lifecycle = Lifecycle(ctx.db, ctx.config, self.client, self._sending, self.tasks.spawn)
        self._retry: dict[int, tuple[int, float]] = {}  # part id -> (failed tries, monotonic not before)
        self.store = None if self.tier is None else PeerStore(self.tier)
        self.eviction = None
        if self.tier is not None and self.store is not None and self.tier.free_space is not None:
            self.eviction = PeerEviction(ctx.db, ctx.config, self.tier, self.store)
        self.outage = CatalogOutage(self.name)
        self.loop = PassLoop(
            self.name, self._pass, poll, wakeup=ctx.peer_wakeup, outage=self.outage, sooner_while_down=True
        )

    def _client(self, tier: PeerTier, token: str, budget: ByteBudget) -> PeerClient:
        self._retune(tier)
        verify: bool | str = True if tier.ca_file is None else str(tier.ca_file)
        refused = self.ctx.metrics.peer_refusals
        return PeerClient(
            token, budget, verify=verify, pace=self._pace, on_refusal=lambda r: refused.labels(r).inc()
        )

    async def _pace(self, nbytes: int) -> None:
        """Wait until ``nbytes`` more may be sent under the peer tier's ``bandwidth_limit`` (if any)."""
        if self.bucket is not None:
            await self.bucket.take(nbytes)

    def _retune(self, tier: PeerTier) -> None:
        """Take the tier's ``bandwidth_limit``: the sends under way pay it from their next chunk."""
        self.bucket = retuned(self.bucket, tier.bandwidth_limit)

    def reconfigure(self, config: Config) -> None:
        """A reload: the peer tier's ``bandwidth_limit`` and ``retention`` (its reloadable keys)."""
        self.tier = config.peer
        if self.tier is not None and self.client is not None:
            self._retune(self.tier)
        if self.lifecycle is not None:
            self.lifecycle.config = config

    @property
    def me(self) -> PeerNode:
        """The node this daemon runs on, as its peers see it."""
        fleet = self.ctx.config.fleet
        return PeerNode(self.ctx.config.node, fleet.advertise_url or "", fleet.failure_domain)

    async def start(self) -> None:
        """Sweep the peer directory's leftovers; record unfinished copies failed; start the loop.

        Without a peer tier nothing runs; without a token only the disk-pressure check does.
        """
        if self.tier is None or self.store is None:
            return
        await self._sweep(self.store)
        if self.sender is not None:
            interrupted = await blocking(self._interrupt)
            if interrupted:
                log.info("peer_copies_interrupted", copies=interrupted)
        if self.sender is not None or self.eviction is not None:
            self.loop.start("replication:loop")
        log.info("replication_started", tier=self.tier.name, sends=self.sender is not None)

    def _interrupt(self) -> int:
        with self.ctx.db.session() as session:
            return interrupt_copies(session, self.ctx.config.node)

    async def _sweep(self, store: PeerStore) -> None:
        """Remove temporary files a crash left in the peer directory (none is being written yet)."""
        try:
            removed = await store.sweep()
        except TierdError as exc:
            log.warning("peer_sweep_failed", tier=store.tier.name, error=str(exc))
            return
        if removed:
            log.info("peer_leftovers_removed", tier=store.tier.name, files=removed)

    async def _pass(self) -> None:
        """Relieve disk pressure, send the parts that lack copies, then tend the copies made.

        Sending comes before tending (``lifecycle``): a part just recorded does not wait for
        the write-offs and drops of older ones; a part whose holder was written off goes at
        the next pass, at once.
        """
        if self.ctx.draining:
            return
        await self._relieve()
        if self.sender is None or self.lifecycle is None:
            return
        nodes = await blocking(self._live_nodes)
        await self._send_all(nodes)
        if await self.lifecycle.tend(nodes):
            self.loop.wake()

    async def _send_all(self, nodes: list[PeerNode]) -> None:
        """Start a task for each part that lacks copies, not being sent nor backing off."""
        assert self.sender is not None
        assert self.lifecycle is not None
        todo = await blocking(self._todo, self.sender.replicas)
        wanted = {part.part_id for part in todo}
        self._retry = {k: v for k, v in self._retry.items() if k in wanted}
        now = time.monotonic()
        for part in todo:
            tries, not_before = self._retry.get(part.part_id, (0, 0.0))
            if part.part_id in self._sending or not_before > now:
                continue
            self._sending.add(part.part_id)
            skip = self.lifecycle.dropping_from(part.part_id)
            self.tasks.spawn(self._send(part, nodes, tries, skip), f"part {part.part_id}")

    async def _relieve(self) -> None:
        """Evict held copies under disk pressure; a directory that cannot be read stops no sending."""
        if self.eviction is None:
            return
        try:
            evicted = await self.eviction.relieve()
        except TierdError as exc:
            log.warning("peer_pressure_check_failed", error=str(exc))
            return
        if evicted:
            log.info("peer_pressure_relieved", evicted=evicted)

    def _todo(self, replicas: int) -> list[PartToSend]:
        config: Config = self.ctx.config
        shared = [t.name for t in config.tiers if t.shared]
        keep_last = config.peer.retention.keep_last if config.peer is not None else None
        with self.ctx.db.read_session() as session:
            return parts_to_send(session, config.node, replicas, shared, keep_last)

    def _live_nodes(self) -> list[PeerNode]:
        timeout = self.ctx.config.fleet.node_timeout
        with self.ctx.db.read_session() as session:
            rows = list_nodes(session)
        return [
            PeerNode(r.name, r.advertise_url, r.failure_domain)
            for r in rows
            if r.advertise_url and r.age_seconds < timeout and r.name != self.ctx.config.node
        ]

    async def _send(self, part: PartToSend, nodes: list[PeerNode], tries: int, skip: frozenset[str]) -> None:
        assert self.sender is not None
        try:
            outcome = await self.sender.send(part, [n for n in nodes if n.name not in skip])
            short = len(outcome.holders) < self.sender.replicas
        except TierdError as exc:
            log.warning("peer_send_failed", checkpoint=part.checkpoint_id, error=str(exc))
            outcome, short = None, True
        finally:
            self._sending.discard(part.part_id)
        if outcome is not None and outcome.grew:
            self.loop.wake()  # its new files go now, to the holders of the others
            return
        if not short:
            self._retry.pop(part.part_id, None)
            return
        delay = self.backoff.delay(tries)
        self._retry[part.part_id] = (tries + 1, time.monotonic() + delay)
        log.warning("peer_copies_short", checkpoint=part.checkpoint_id, retry_in=round(delay, 1))
        asyncio.get_running_loop().call_later(delay, self.loop.wake)

    async def stop(self, timeout: float) -> None:
        """Stop the loop and cut the sends under way (an unfinished copy is never ``verified``)."""
        await self.loop.stop(min(timeout, 5.0))
        await self.tasks.drain(0)
        if self.client is not None:
            await self.client.close()
        if self.store is not None:
            await self.store.close()
