"""Disk pressure on the peer directory: the copies this node holds for others go first.

When the peer directory's file system has less than the peer tier's ``free_space.evict_below``
free, held copies are removed until ``evict_to`` is free: first those whose part is safe
without them (verified on a shared tier, or on a third node), oldest step first, then the
rest, oldest first. Each is recorded ``deleted`` (error ``evicted``) so its sender sends the
part to the next node. The node's own tier-0 data is never touched here: where tier 0 shares
the file system, give the peer tier the higher ``evict_below`` so this runs first (tier 0's
own eviction is retention's, at its lower mark).
"""

from __future__ import annotations

from tierd.config import Config, PeerTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends.peer import PeerStore
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import ReplicaState
from tierd.daemon.catalog.peer_copies import HeldCopy, held_copies, mark_peer_copy
from tierd.logs import get_logger

__all__ = ["PeerEviction"]

log = get_logger(__name__)


class PeerEviction:
    """Frees the peer directory of ``config.peer`` under disk pressure (see the module docstring)."""

    def __init__(self, db: Database, config: Config, tier: PeerTier, store: PeerStore) -> None:
        self.db = db
        self.config = config
        self.tier = tier
        self.store = store

    async def relieve(self) -> int:
        """Evict held copies while the directory is below its low mark; how many were evicted.

        Raises Transient/PermanentBackendError when the directory cannot be read.
        """
        if self.tier.free_space is None:
            return 0
        space = await self.store.backend.space()
        low, high = self.tier.free_space.marks(space.total)
        if space.free >= low:
            return 0
        wanted = high - space.free
        evicted = 0
        for held in await blocking(self._held):
            if wanted <= 0:
                break
            await self._evict(held)
            wanted -= held.bytes
            evicted += 1
        return evicted

    def _held(self) -> list[HeldCopy]:
        shared = [t.name for t in self.config.tiers if t.shared]
        with self.db.read_session() as session:
            return held_copies(session, self.config.node, shared)

    async def _evict(self, held: HeldCopy) -> None:
        def record() -> None:
            with self.db.session() as session:
                mark_peer_copy(
                    session, held.part_id, self.config.node, ReplicaState.DELETED, "evicted: disk pressure"
                )

        await blocking(record)  # first: the sender no longer counts it, whatever happens next
        removed = await self.store.delete(PeerStore.relpath(held.node, held.checkpoint_id))
        log.warning(
            "peer_copy_evicted",
            node=held.node,
            checkpoint=held.checkpoint_id,
            files=removed,
            safe_elsewhere=held.safe_elsewhere,
        )
