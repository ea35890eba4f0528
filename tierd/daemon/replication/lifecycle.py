"""The life of this node's peer copies after they are made: written off, dropped.

Each pass (before any part is sent):

- a copy whose holder is no longer live (no heartbeat within ``fleet.node_timeout``) is
  **written off**: ``failed``, so it keeps no step safe and the part goes to the next node;
- a copy is **dropped** (``DELETE`` of the part on its holder, then ``deleted``) once its
  holder should no longer keep it (``copies_to_drop``): a ``failed`` one (what the holder took
  of it); a verified one whose part is verified on a durable shared tier (pinned or held
  steps too: that copy protects them now); a verified one of a step the peer tier's
  ``retention.keep_last`` no longer keeps (pinned and held steps are kept), or that is gone.
  A holder that is not live is asked again at a later pass, once it is back.

A drop does not hold up the part's sending: while a holder is asked to drop its copy, the
part may go to the other nodes (``dropping``: never to that holder), and a holder that keeps
refusing the drop (its answer logged ``peer_drop_failed``) is asked again at each pass. No
drop starts while the part is being sent (``sending``): the copy being made might be the one
dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence, Set
from typing import Any

from tierd.config import Config
from tierd.daemon.aio import blocking
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.client import PeerClient, PeerRefused
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import ReplicaState
from tierd.daemon.catalog.peer_copies import CopyToDrop, copies_to_drop, mark_peer_copy, write_off_copies
from tierd.logs import get_logger

__all__ = ["Lifecycle"]

log = get_logger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], object]


class Lifecycle:
    """Writes off and drops the copies of ``config.node``'s parts (see the module docstring)."""

    def __init__(
        self, db: Database, config: Config, client: PeerClient, sending: Set[int], spawn: Spawn
    ) -> None:
        """``sending``: the part ids being sent (the sending's own set); ``spawn`` runs a task."""
        self.db = db
        self.config = config
        self.client = client
        self.sending = sending
        self.spawn = spawn
        #: (part id, holder) of each drop under way.
        self.dropping: set[tuple[int, str]] = set()

    def dropping_from(self, part_id: int) -> frozenset[str]:
        """The holders being asked to drop their copy of the part (not to be sent it meanwhile)."""
        return frozenset(holder for part, holder in self.dropping if part == part_id)

    async def tend(self, live: Sequence[PeerNode]) -> bool:
        """Write off dead holders' copies, and start dropping what live holders should not keep.

        Returns whether a copy was written off (its part is to be sent again).
        """
        written_off = await blocking(self._write_off, [n.name for n in live])
        for checkpoint_id, holder in written_off:
            log.warning("peer_copy_written_off", checkpoint=checkpoint_id, holder=holder)
        by_name = {n.name: n for n in live}
        by_part: dict[int, list[tuple[CopyToDrop, PeerNode]]] = {}
        for drop in await blocking(self._drops):
            peer = by_name.get(drop.holder)
            key = (drop.part_id, drop.holder)
            if peer is not None and drop.part_id not in self.sending and key not in self.dropping:
                by_part.setdefault(drop.part_id, []).append((drop, peer))
        for part_id, drops in by_part.items():
            self.dropping.update((part_id, drop.holder) for drop, _ in drops)
            self.spawn(self._drop_all(drops), f"drop part {part_id}")
        return bool(written_off)

    def _write_off(self, live: list[str]) -> list[tuple[int, str]]:
        with self.db.session() as session:
            return write_off_copies(session, self.config.node, live)

    def _drops(self) -> list[CopyToDrop]:
        durable = [t.name for t in self.config.tiers if t.shared and t.durable]
        keep_last = self.config.peer.retention.keep_last if self.config.peer is not None else None
        with self.db.read_session() as session:
            return copies_to_drop(session, self.config.node, durable, keep_last)

    async def _drop_all(self, drops: list[tuple[CopyToDrop, PeerNode]]) -> None:
        for drop, peer in drops:
            try:
                await self._drop(drop, peer)
            finally:
                self.dropping.discard((drop.part_id, drop.holder))

    async def _drop(self, drop: CopyToDrop, peer: PeerNode) -> None:
        try:
            removed = await self.client.drop(peer, self.config.node, drop.checkpoint_id)
        except PeerRefused as exc:
            log.warning("peer_drop_failed", checkpoint=drop.checkpoint_id, holder=peer.name, error=str(exc))
            return

        def record() -> None:
            with self.db.session() as session:
                mark_peer_copy(session, drop.part_id, peer.name, ReplicaState.DELETED)

        await blocking(record)
        log.info(
            "peer_copy_dropped",
            checkpoint=drop.checkpoint_id,
            holder=peer.name,
            reason=drop.reason,
            files=removed,
        )
