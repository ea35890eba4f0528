"""One part of this node sent to its peers: each holder gets every file, or the copy is ``failed``.

The holders are the nodes ``choose.ring_order`` gives for the step (the same answer on every
daemon), less those that hold a verified copy already (those whose copy was dropped or
evicted are tried last): the first that take the whole part
until ``replicas`` do. A copy is recorded ``copying`` (naming its holder) before its first
byte leaves and ``verified`` only once every file of the part was taken, each checked by the
holder against the CRC64NVME taken at first sight. A holder that cannot be reached, is full
(507), busy (503) or refuses the token (403) is recorded ``failed`` with its answer, what it
took of the part is dropped again (best effort), and the next node on the ring is tried.
Files move ``concurrency`` at a time for the whole service (``slots``), each streamed through
the buffer budget and the tier's bandwidth limit (``PeerClient``) from the first of this node's
own tiers that has it: tier 0, else the node-local tiers after it (a RAM tier 0 released the
step once its copies allowed; a copy written off later is made again from the NVMe tier).

A part is sent once recorded, before its step is complete. When it grows meanwhile (the
format's marker landed beside it), its copies are reopened (``pending``): their holders are
tried first and sent only the files they do not hold yet (a ``HEAD`` each: a file at its final
name on a holder was checked there against its first-sight checksum). A copy is ``verified``
only if it took every file the part has by then (``settle_copy``); else the send ends with
``grew`` and the part is sent again at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import cast

from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend
from tierd.daemon.backends.base import RangeReader
from tierd.daemon.backends.peer.choose import PeerNode, ring_order
from tierd.daemon.backends.peer.client import PeerClient, PeerFile, PeerRefused
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import ReplicaState
from tierd.daemon.catalog.part_replicas import files_of_part
from tierd.daemon.catalog.peer_copies import PartToSend, mark_peer_copy, settle_copy
from tierd.daemon.transfer.spec import FileSpec
from tierd.errors import IntegrityError, NotFound, TierdError
from tierd.logs import get_logger

__all__ = ["PartSender", "SendOutcome"]

log = get_logger(__name__)


@dataclass(frozen=True)
class SendOutcome:
    """Who holds the part now (verified copies, old and new) and who refused it in this try."""

    holders: tuple[str, ...]
    refused: tuple[str, ...]
    #: The part grew while it was sent: send it again now (its holders keep what they took).
    grew: bool = False


class PartSender:
    """Sends parts of ``me`` to peers with ``client``, reading them from ``sources`` in order.

    ``sources``: this node's own tiers, tier 0 first (see the module docstring).
    """

    def __init__(
        self,
        db: Database,
        me: PeerNode,
        sources: Sequence[Backend],
        client: PeerClient,
        replicas: int,
        slots: asyncio.Semaphore,
    ) -> None:
        self.db = db
        self.me = me
        self.sources = list(sources)
        self.client = client
        self.replicas = replicas
        self.slots = slots

    async def send(self, part: PartToSend, nodes: Sequence[PeerNode]) -> SendOutcome:
        """Send ``part`` to peers among ``nodes`` until ``replicas`` hold it (or none is left to try)."""
        holders = list(part.holders)
        refused: list[str] = []
        ring = [n for n in ring_order(f"{part.run}/{part.step}", self.me, nodes) if n.name not in holders]
        # a holder of the part's earlier files first; one that dropped or evicted its copy
        # last (no ping-pong under disk pressure)
        earlier = [n for n in ring if n.name in part.earlier]
        rest = [n for n in ring if n.name not in part.earlier]
        order = (
            earlier
            + [n for n in rest if n.name not in part.passed]
            + [n for n in rest if n.name in part.passed]
        )
        specs = await blocking(self._specs, part.part_id)
        for peer in order:
            if len(holders) >= self.replicas:
                break
            taken = await self._send_to(peer, part, specs)
            if taken is None:
                return SendOutcome(tuple(holders), tuple(refused), grew=True)
            (holders if taken else refused).append(peer.name)
        return SendOutcome(tuple(holders), tuple(refused))

    def _specs(self, part_id: int) -> list[FileSpec]:
        with self.db.read_session() as session:
            return [FileSpec.of(row) for row in files_of_part(session, part_id)]

    async def _mark(
        self, part: PartToSend, holder: str, state: ReplicaState, error: str | None = None
    ) -> None:
        def write() -> None:
            with self.db.session() as session:
                mark_peer_copy(session, part.part_id, holder, state, error)

        await blocking(write)

    async def _send_to(self, peer: PeerNode, part: PartToSend, specs: Sequence[FileSpec]) -> bool | None:
        """Whether ``peer`` took every file of the part (its copy recorded either way); None: it grew.

        Raises the reading side's TierdError (a file changed or gone since it was recorded:
        no other peer would fare better), the copy recorded ``failed`` first.
        """
        await self._mark(part, peer.name, ReplicaState.COPYING)
        todo = await self._not_held(peer, part, specs) if peer.name in part.earlier else specs
        log.info("peer_copy_sending", checkpoint=part.checkpoint_id, holder=peer.name, files=len(todo))
        source: TierdError | None = None
        try:
            async with asyncio.TaskGroup() as group:
                for spec in todo:
                    group.create_task(self._send_file(peer, part, spec))
        except* PeerRefused as refusals:
            error = str(refusals.exceptions[0])
        except* TierdError as broken:
            source = cast(TierdError, broken.exceptions[0])
            error = f"this node's copy: {source}"
        else:
            if not await blocking(self._settle, part.part_id, peer.name, len(specs)):
                log.info("peer_copy_grew", checkpoint=part.checkpoint_id, holder=peer.name, files=len(specs))
                return None
            log.info("peer_copy_verified", checkpoint=part.checkpoint_id, holder=peer.name, files=len(specs))
            return True
        await self._mark(part, peer.name, ReplicaState.FAILED, error)
        log.warning("peer_copy_failed", checkpoint=part.checkpoint_id, holder=peer.name, error=error)
        with suppress(PeerRefused):  # what it took of the part; a dead peer sweeps its own at start
            await self.client.drop(peer, self.me.name, part.checkpoint_id)
        if source is not None:
            raise source
        return False

    def _settle(self, part_id: int, holder: str, files: int) -> bool:
        with self.db.session() as session:
            return settle_copy(session, part_id, holder, files)

    async def _not_held(self, peer: PeerNode, part: PartToSend, specs: Sequence[FileSpec]) -> list[FileSpec]:
        """The files of ``specs`` that ``peer`` does not hold at their size (one HEAD each)."""
        todo = []
        for spec in specs:
            file = PeerFile(self.me.name, part.checkpoint_id, spec.relpath, spec.checksum)
            if await self.client.held_size(peer, file) != spec.size:
                todo.append(spec)
        return todo

    async def _send_file(self, peer: PeerNode, part: PartToSend, spec: FileSpec) -> None:
        file = PeerFile(self.me.name, part.checkpoint_id, spec.relpath, spec.checksum)

        async def open_reader() -> RangeReader:
            return await self._open(spec)

        async with self.slots:
            await self.client.deliver(peer, file, open_reader)

    async def _open(self, spec: FileSpec) -> RangeReader:
        """The file from the first source that has it. Raises NotFound when none has.

        Raises IntegrityError when its size is not the recorded one (its holder refuses any
        byte that differs anyway: each file is checked against its first-sight checksum).
        """
        missing: NotFound | None = None
        for source in self.sources:
            try:
                reader = await source.open_reader(spec.relpath)
            except NotFound as exc:
                missing = missing or exc
                continue
            if reader.size != spec.size:
                await reader.close()
                where = source.location(spec.relpath)
                raise IntegrityError(f"{where}: size {reader.size} != {spec.size} recorded at first sight")
            return reader
        assert missing is not None  # sources is never empty
        raise missing
