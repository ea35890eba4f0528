"""Run one claimed restore: the selected files from the nearest verified tier into the target.

The copy is the one a hop makes (``transfer.copyset.copy_checkpoint_files`` over a
``FileCopier``): each file is written under a temporary name in the target, verified
against the checksum taken at first sight while it is written, renamed into place and
fsynced (reads pay the source tier's ``bandwidth_limit``, as copies into it do). The data
goes first, and the format's completion markers (``tierd.daemon.markers``) only once the data is
durable. A file whose copy on the source is bad is taken from the next tier with a
verified replica (``copier.FallbackCopier``), and the bad replica is marked failed for the
pipeline to copy again. A heartbeat saves progress and renews the lease. Each file and
directory gets the owner, group and mode recorded at first sight, or, when the request names
an ``owner``, that owner and group with the recorded modes (``restore.owners``).

Ends: ``done`` (with ``to: tier0`` and every file restored, the tier-0 replica is verified
again); ``failed`` or ``cancelled`` (what the restore wrote is removed); ``released`` at
shutdown (queued again with its progress: the next start skips the files already in place
with the right size and checksum); ``lost`` when another worker took the lease.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tierd.config import Config, PosixTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import Backend, WriteBatch
from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.backends.posix.backend import PosixBackend
from tierd.daemon.backends.posix.errors import os_errors
from tierd.daemon.beneath import Root
from tierd.daemon.catalog import restores
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.peer_reads import PeerHolding, verified_peer_copies
from tierd.daemon.catalog.restores import RestoreClaim, RestorePlan
from tierd.daemon.markers import split_markers
from tierd.daemon.restore.cleanup import remove_restored, remove_temps
from tierd.daemon.restore.copier import FallbackCopier, archive_classes
from tierd.daemon.restore.destination import Layout, layout_of, of_part, roots_of
from tierd.daemon.restore.fallback import Fallbacks
from tierd.daemon.restore.owners import given_owner, owners_of_directories, restored_owner
from tierd.daemon.restore.paths import check_target, is_fresh
from tierd.daemon.restore.peers import PeerOpener, peer_sources
from tierd.daemon.restore.progress import Meter
from tierd.daemon.restore.sources import plan_sources
from tierd.daemon.transfer.copier import FileCopier
from tierd.daemon.transfer.copyset import copy_checkpoint_files
from tierd.daemon.transfer.lease import lease_fence
from tierd.daemon.transfer.retry import FILE_ATTEMPTS, FILE_BACKOFF, Backoff
from tierd.daemon.transfer.spec import FileSpec
from tierd.daemon.transfer.throttle import PriorityPool, TokenBucket
from tierd.errors import CatalogError, IntegrityError, NotFound, TierdError
from tierd.logs import get_logger

__all__ = ["Outcome", "RestoreOptions", "RestoreRunner"]

log = get_logger(__name__)
Outcome = str  # "done" | "failed" | "cancelled" | "released" | "lost"


@dataclass(frozen=True)
class RestoreOptions:
    """How the restore service polls, leases and retries (tests shorten them)."""

    #: Between claims unwoken: every restore is asked for through this daemon's API, which wakes
    #: the service (``RestoreService``), so the poll only finds what another process put in
    #: the catalog. Every 2 s it was an idle daemon's most run write transaction.
    poll_interval: float = 60.0
    lease_seconds: float = 60.0
    renew_interval: float = 15.0
    progress_interval: float = 0.5
    #: How often freed heap memory is handed back to the OS while a restore runs (``malloc_trim``).
    trim_interval: float = 5.0
    #: Restores run at once by one daemon.
    parallel: int = 2
    file_attempts: int = FILE_ATTEMPTS
    file_backoff: Backoff = FILE_BACKOFF

    @property
    def fence_seconds(self) -> float:
        """How long a restore goes on while its lease cannot be renewed (as a copy job's)."""
        return lease_fence(self.lease_seconds, self.renew_interval)


@dataclass(frozen=True)
class _Work:
    """A prepared restore: the layout, the destination, the sources nearest first, the files."""

    path: str  # the checkpoint's, relative to every tier's root
    layout: Layout
    dst: PosixBackend
    sources: list[Backend]
    buckets: list[TokenBucket | None]  # each source tier's bandwidth cap
    passes: list[list[FileSpec]]  # see ``copy_passes``
    mtimes: dict[str, int]  # each file's recorded mtime, by its name under the root
    concurrency: int
    #: Source tier name -> the only names it holds (this node's part, on a node-local tier 0).
    partial: dict[str, frozenset[str]]


class RestoreRunner:
    """Runs one claimed restore to an outcome (see the module docstring)."""

    def __init__(
        self,
        *,
        config: Config,
        db: Database,
        backends: Mapping[str, Backend],
        budget: ByteBudget | None,
        owner: str,
        claim: RestoreClaim,
        options: RestoreOptions,
        wake_pipeline: Callable[[], None],
        peers: PeerOpener | None = None,
    ) -> None:
        """``peers`` opens a holder's copies (``PeerFetch.source``; None: no peer is read)."""
        self.config, self.db, self.backends, self.budget = config, db, backends, budget
        self.peers = peers
        self.owner, self.claim, self.options = owner, claim, options
        self.meter = Meter(int(claim.detail.get("bytes_total", 0)), int(claim.detail.get("files_total", 0)))
        self.fallbacks = Fallbacks(
            db, claim.checkpoint_id, list(claim.detail.get("fallbacks") or []), wake_pipeline
        )
        self.cancel_requested = False  # set by the service before it cancels the task (DELETE)
        self.lost = False
        self._ending = False  # the copy is over: the heartbeat stops (``_stop_heartbeat``)
        #: Stopped because the lease could not be renewed for ``fence_seconds`` (catalog away).
        self.fenced = False
        #: When the last lease renewal that worked was sent (the claim's, at first).
        self.renewed_at = time.monotonic()
        self.source: str | None = None
        #: Files copied from each source, over every attempt of this restore.
        self.read_from: Counter[str] = Counter(claim.detail.get("read_from") or {})

    async def run(self) -> Outcome:
        """Restore, then record the outcome; re-raises CancelledError after releasing the job at shutdown."""
        node = None if self.config.tier0.shared else self.config.node
        plan = await blocking(restores.start_restore, self.db, self.claim, self.owner, node=node)
        if plan is None:
            return "lost"
        try:
            work = await blocking(self._prepare, plan)
        except TierdError as exc:
            return await self._fail(None, exc)
        del plan  # its files, one object each, are in ``work`` now: not held while they are copied
        log.info(
            "restore_started", restore=self.claim.job_id, source=self.source, target=str(work.layout.target)
        )
        main = asyncio.current_task()
        assert main is not None
        heartbeat = asyncio.create_task(self._heartbeat(main), name=f"restore:heartbeat:{self.claim.job_id}")
        try:
            await self._copy(work)
        except asyncio.CancelledError:
            await self._stop_heartbeat(heartbeat)
            return await self._interrupted(work, main)
        except Exception as exc:
            await self._stop_heartbeat(heartbeat)
            return await self._fail(work, exc)
        finally:
            await self._stop_heartbeat(heartbeat)
        return await self._done(work)

    async def _stop_heartbeat(self, heartbeat: asyncio.Task[None]) -> None:
        """Stop the heartbeat, and wait until it has, before the restore's end is recorded.

        A cancel alone did not do: on Python 3.11 ``asyncio.wait_for`` returns a save's
        result that lands with the cancel and drops the cancel, and the heartbeat ran on,
        found the finished restore no longer running at its next save, set ``lost`` and
        cancelled the restore's task (in ``_done``, or whatever it ran next). ``_ending``
        stops it whatever the cancel did.
        """
        self._ending = True
        heartbeat.cancel()
        await asyncio.wait([heartbeat])

    def _prepare(self, plan: RestorePlan) -> _Work:
        """The layout, destination and sources (blocking). Raises RestoreRefused, Conflict."""
        detail = self.claim.detail
        with self.db.read_session() as session:
            relpaths = of_part(session, plan.claim.checkpoint_id, detail, [f.relpath for f in plan.files])
        layout = layout_of(self.config, plan.path, relpaths, detail)
        roots = roots_of(self.config, detail)
        check_target(str(layout.target), roots, overwrite=True)  # the roots may have changed since
        tree = layout.tree(roots)
        peers = peer_sources(self.config, plan.claim.checkpoint_id, self._holdings(plan), layout, self.peers)
        sources = plan_sources(self.config, plan, layout, self.backends, peers)  # before anything is written
        self.source = sources.first
        if sources.tier0_part is not None:  # a bad file there fails this part only
            self.fallbacks.parts[self.config.tier0.name] = sources.tier0_part
        self.fallbacks.peers = peers.parts
        given = given_owner(detail)
        dst = self._destination(plan, layout, tree, given)
        specs = [
            FileSpec(layout.name_of(f.relpath), f.size, f.checksum, f.mtime_ns, restored_owner(f, given))
            for f in plan.files
            if f.relpath in layout.names
        ]
        self.meter.resuming = not is_fresh(tree)
        self.meter.file_ids = {
            layout.name_of(f.relpath): f.id for f in plan.files if f.relpath in layout.names
        }
        self.meter.placed_all |= {layout.name_of(r) for r in plan.done if r in layout.names}
        return _Work(
            path=plan.path,
            layout=layout,
            dst=dst,
            sources=sources.backends,
            buckets=sources.buckets,
            passes=self._passes(plan, specs),
            mtimes={s.relpath: s.mtime_ns for s in specs},
            concurrency=sources.concurrency,
            partial=sources.partial,
        )

    def _holdings(self, plan: RestorePlan) -> list[PeerHolding]:
        """The verified peer copies of the step's parts (none to read without a peer token)."""
        if self.peers is None or plan.local_part is None:
            return []
        with self.db.read_session() as session:
            return verified_peer_copies(session, plan.claim.checkpoint_id)

    def _destination(
        self, plan: RestorePlan, layout: Layout, tree: Root, given: tuple[int, int] | None
    ) -> PosixBackend:
        """The target as a POSIX backend under its allowed root, its top directory made."""
        dst = PosixBackend(
            PosixTier(
                name="restore", kind="posix", path=layout.root, concurrency=self.config.tier0.concurrency
            ),
            budget=self.budget,
            tree=tree,
        )
        dst.expect_directories(owners_of_directories(plan, layout, given))
        with os_errors("create", str(layout.root)):
            tree.open(create_top=True).close()  # below its allowed root, never through a symlink
        return dst

    def _passes(self, plan: RestorePlan, specs: list[FileSpec]) -> list[list[FileSpec]]:
        """``copy_passes`` of ``specs``: the format's completion markers last."""
        markers, _ = split_markers(
            plan.format, [s.relpath for s in specs], marker=self.config.marker_for(plan.path)
        )
        chosen = set(markers)
        data, last = [s for s in specs if s.relpath not in chosen], [s for s in specs if s.relpath in chosen]
        return copy_passes(data, last)

    def _copier(self, work: _Work, batch: WriteBatch) -> FileCopier:
        copiers = [
            FileCopier(
                src=src,
                dst=work.dst,
                slots=PriorityPool(work.concurrency),
                priority=0,
                resume=None,
                bucket=bucket,
                readback=False,
                backoff=self.options.file_backoff,
                attempts=self.options.file_attempts,
                integrity_attempts=1,  # a mismatch is this tier's copy: the next tier's is tried
                batch=batch,
            )
            for src, bucket in zip(work.sources, work.buckets, strict=True)
        ]
        first = copiers[0]
        return FallbackCopier(
            **{
                **vars(first),
                "fallbacks": copiers[1:],
                "fallback": self.fallbacks.record,
                "partial": work.partial,
                "archived": archive_classes(self.config.tiers),
                "read_from": self.read_from,
            }
        )

    async def _copy(self, work: _Work) -> None:
        """Each of ``work.passes`` in turn (see ``copy_passes``)."""

        async def skip(spec: FileSpec) -> bool:
            return await _in_place(work.dst, spec)

        for files in work.passes:
            batch = work.dst.batch()
            await copy_checkpoint_files(
                self._copier(work, batch),
                batch,
                files,
                concurrency=work.concurrency,
                skip=skip if self.meter.resuming else None,
                progress=lambda spec: self.meter.counter(spec.relpath, spec.size),
                done=lambda spec, info: self.meter.finish(spec, skipped=info is None),
            )

    async def _heartbeat(self, main: asyncio.Task[object]) -> None:
        """Save progress every ``progress_interval``, renewing the lease every ``renew_interval``.

        Stops the restore (``lost``) when the lease was lost, or could not be renewed for
        ``fence_seconds`` while the catalog failed: another worker may claim it once the lease
        runs out, and two must never write the same files.
        """
        failing = False
        while not self._ending:
            await asyncio.sleep(self.options.progress_interval)
            sent = time.monotonic()
            renew = sent - self.renewed_at >= self.options.renew_interval
            try:
                ok = await asyncio.wait_for(self._save(renew=renew), timeout=max(self._fence_left(), 0.01))
            except (CatalogError, TimeoutError) as exc:
                if self._ending:
                    return
                if not failing:
                    error = str(exc) or "timed out"
                    log.warning("restore_progress_not_saved", restore=self.claim.job_id, error=error)
                    failing = True
                if self._fence_left() <= 0:
                    self.lost = self.fenced = True
                    main.cancel()
                    return
                continue
            if self._ending:  # the save raced the copy's end: its answer is no news
                return
            if failing:
                log.info("restore_progress_saved_again", restore=self.claim.job_id)
                failing = False
            if not ok:
                self.lost = True  # cancelled (DELETE) or taken by another worker
                main.cancel()
                return
            if renew:
                self.renewed_at = sent

    def _fence_left(self) -> float:
        """Seconds this restore may go on before its lease could run out unrenewed."""
        return self.renewed_at + self.options.fence_seconds - time.monotonic()

    async def _save(self, *, renew: bool) -> bool:
        placed, upto = self.meter.placed_since_saved()
        ids = [self.meter.file_ids[name] for name in placed if name in self.meter.file_ids]
        saved = await blocking(
            restores.save_restore_progress,
            self.db,
            self.claim.job_id,
            self.owner,
            self._progress(),
            ids,
            source_tier=self.source,
            lease_seconds=self.options.lease_seconds if renew else None,
        )
        if saved:
            self.meter.saved(upto)
        return saved

    def _progress(self) -> dict[str, Any]:
        return {**self.meter.snapshot(), "fallbacks": self.fallbacks.items, "read_from": dict(self.read_from)}

    async def _interrupted(self, work: _Work, main: asyncio.Task[object]) -> Outcome:
        """Cancelled: by DELETE (clean up), by a lost lease (stop), or by shutdown (release, re-raise)."""
        if self.fenced:  # the catalog is away: whoever claims it next resumes from what was saved
            main.uncancel()
            lease = self.options.lease_seconds
            log.warning("restore_lease_not_renewed", restore=self.claim.job_id, lease=lease)
            return "lost"
        if self.cancel_requested or (self.lost and await blocking(self._was_cancelled)):
            main.uncancel()
            removed = await blocking(self._clean, work)
            log.info("restore_cancelled", restore=self.claim.job_id, removed=removed)
            return "cancelled"
        if self.lost:
            main.uncancel()
            log.warning("restore_lease_lost", restore=self.claim.job_id)
            return "lost"
        try:
            await asyncio.shield(self._save(renew=False))
            await asyncio.shield(blocking(restores.release_restore, self.db, self.claim.job_id, self.owner))
        except CatalogError as exc:
            log.warning("restore_release_failed", restore=self.claim.job_id, error=str(exc))
        log.info("restore_released", restore=self.claim.job_id, bytes_done=self.meter.bytes_done)
        raise asyncio.CancelledError

    def _was_cancelled(self) -> bool:
        with self.db.read_session() as session:
            return restores.get_restore(session, self.claim.job_id).job.state == "cancelled"

    def _clean(self, work: _Work | None) -> int:
        if work is None:
            return 0
        names = [work.layout.name_of(r) for r in work.layout.names]
        return remove_restored(
            work.dst.tree,
            work.layout.target_parts(),
            names,
            fresh=bool(self.claim.detail.get("fresh")),
            placed=self.meter.placed_all,
        )

    async def _fail(self, work: _Work | None, exc: BaseException) -> Outcome:
        error = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, TierdError):
            log.error("restore_error", restore=self.claim.job_id, error=error, exc_info=exc)
        removed = await blocking(self._clean, work)
        await blocking(
            restores.finish_restore,
            self.db,
            self.claim.job_id,
            self.owner,
            error=error,
            progress=self._progress(),
            source_tier=self.source,
        )
        log.warning("restore_failed", restore=self.claim.job_id, error=error, removed=removed)
        return "failed"

    async def _done(self, work: _Work) -> Outcome:
        location = None
        await blocking(remove_temps, work.dst.tree, list(work.mtimes))  # a shutdown's cut writes
        recorded, part = tier0_share(self.claim.detail)
        if recorded:
            await blocking(_keep_mtimes, work)
            location = str(self.config.tier0.path.resolve() / work.path)
        ok = await blocking(
            restores.finish_restore,
            self.db,
            self.claim.job_id,
            self.owner,
            error=None,
            progress=self._progress(),
            source_tier=self.source,
            tier0_location=location,
            tier0_part=part,
        )
        if not ok:
            return "lost"
        log.info(
            "restore_done",
            restore=self.claim.job_id,
            **self.meter.snapshot(),
            fallbacks=len(self.fallbacks.items),
        )
        return "done"


async def _in_place(dst: Backend, spec: FileSpec) -> bool:
    """Whether ``dst`` already holds ``spec`` with its size and checksum (a resumed restore)."""
    try:
        info = await dst.stat(spec.relpath)
        if info.size != spec.size:
            return False
        await dst.verify(spec.relpath, spec.checksum)
    except (NotFound, IntegrityError):
        return False
    return True


def tier0_share(detail: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether a restore puts back on tier 0 what the catalog records there, and whose part.

    The whole checkpoint (``None``), or this node's own part (``--node`` naming it): never a
    selection of files or ranks, nor another node's part, which tier 0 here never held.
    """
    if not detail.get("to_tier0") or detail.get("files") is not None or detail.get("ranks") is not None:
        return False, None
    part_of = detail.get("part_of")
    if part_of is not None and part_of != detail.get("node"):
        return False, None
    return True, part_of


def _keep_mtimes(work: _Work) -> None:
    """Give tier 0's restored files their recorded mtimes, so detection sees them unchanged.

    Each file is reached by descriptors, and a symlink in its place is never followed.
    """
    tree = work.dst.tree
    for name, mtime_ns in work.mtimes.items():
        place = tree.place(name)
        with tree.open(place.parts) as directory:
            os.utime(place.name, ns=(mtime_ns, mtime_ns), dir_fd=directory.fd, follow_symlinks=False)


def copy_passes(data: list[FileSpec], markers: list[FileSpec]) -> list[list[FileSpec]]:
    """The copies to make, one after another, so that the markers land last.

    ``copy_checkpoint_files`` commits everything else before it copies the file ordered last
    (by ``mtime_ns``), alone. One pass does when there is one marker or none: the marker is
    ordered last, or, with none, the smallest file (the file copied alone is the tail nobody
    shares). Several markers take a second pass, after the data is committed, in the order
    they were written. ``mtime_ns`` here is only that order; the recorded one is kept apart.
    """
    smallest = min(data, key=lambda s: (s.size, s.relpath), default=None)
    ordered = [replace(s, mtime_ns=int(s is smallest and len(markers) != 1)) for s in data]
    if len(markers) == 1:
        return [[*ordered, replace(markers[0], mtime_ns=2)]]
    return [files for files in (ordered, markers) if files]
