"""What a restore does when a tier's copy of a file is bad: report it, and mark the replica failed.

The replica goes ``failed`` (``catalog.mismatches.mark_recheck_failed``, audited as
``reverify_failed``), once per tier, so the pipeline copies it again from a good tier, and
the restore's ``fallbacks`` lists each file taken from another tier, and why. A peer's copy
of a part (a source ``peer:<holder>``) goes ``failed`` the same way, that part's copy on that
holder only (``catalog.peer_reads.fail_peer_copy``, audited ``peer_copy_failed``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tierd.daemon.aio import blocking
from tierd.daemon.catalog import mismatches, peer_reads
from tierd.daemon.catalog.db import Database
from tierd.daemon.transfer.spec import FileSpec
from tierd.errors import CatalogError, TierdError
from tierd.logs import get_logger

__all__ = ["ACTOR", "Fallbacks"]

log = get_logger(__name__)
ACTOR = "restore"


class Fallbacks:
    """The fallbacks of one restore (``items``, as its job's detail shows them)."""

    def __init__(
        self, db: Database, checkpoint_id: int, items: list[dict[str, Any]], wake_pipeline: Callable[[], None]
    ) -> None:
        self.db = db
        self.checkpoint_id = checkpoint_id
        self.items = items
        self.wake_pipeline = wake_pipeline
        self.marked: set[str] = set()
        #: Tier -> the part (this node's) its replica holds, when it holds only that part.
        self.parts: dict[str, int] = {}
        #: Peer source -> (holder, name under the restore's root -> the id of its part).
        self.peers: dict[str, tuple[str, dict[str, int]]] = {}

    async def record(self, spec: FileSpec, bad: str, good: str | None, error: TierdError) -> None:
        """``spec`` on ``bad`` failed with ``error``; it is taken from ``good`` next (None: none left)."""
        text = f"{type(error).__name__}: {error}"
        if good is not None:
            self.items.append({"file": spec.relpath, "from_tier": bad, "to_tier": good, "error": text})
        log.warning("restore_bad_replica", file=spec.relpath, bad_tier=bad, next_tier=good, error=text)
        peer = self.peers.get(bad)
        mark = bad if peer is None else f"{bad}#{peer[1].get(spec.relpath)}"
        if mark in self.marked:
            return
        self.marked.add(mark)
        try:
            if peer is not None:
                await blocking(self._fail_peer_copy, peer[1].get(spec.relpath), peer[0], text)
                return
            await blocking(self._mark_failed, bad, text)
        except CatalogError as exc:
            log.warning("replica_not_marked_failed", tier=bad, error=str(exc))
            return
        self.wake_pipeline()

    def _fail_peer_copy(self, part_id: int | None, holder: str, error: str) -> None:
        if part_id is None:
            return
        with self.db.session() as session:
            peer_reads.fail_peer_copy(
                session, part_id, holder, error=f"restore found bad bytes: {error}", actor=ACTOR
            )

    def _mark_failed(self, tier: str, error: str) -> None:
        with self.db.session() as session:
            mismatches.mark_recheck_failed(
                session,
                self.checkpoint_id,
                tier,
                error=f"restore found bad bytes: {error}",
                actor=ACTOR,
                part_id=self.parts.get(tier),
            )
