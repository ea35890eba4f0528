"""After detection: notice when a recorded checkpoint's files change or vanish.

The reconcile scan compares every recorded file's size and mtime with the disk. A file
whose mtime moved but whose bytes hash to the recorded checksum (fsspec's copy sets the
mtime after the data; ``touch``) only gets its mtime updated. Anything else (a file
missing, rewritten or added) marks the checkpoint ``changed`` with a warning and an
audit event: it is never silently re-recorded. Its tier-0 replica is then ``failed``: never a
source again, never counted as a copy. A verified copy on a later tier holds the bytes
checked at first sight, so the checkpoint moves on down from there (the scheduler takes
changed checkpoints too). A file that became a symlink, a FIFO or
a hard link counts as missing, and is not read. A checkpoint whose whole path is gone
(the training job rotated it away) gets its tier-0 replica marked ``deleted``, also when it
was marked ``changed`` before (an ``rm -rf`` seen half-way).

Besides the reconcile, the watcher runs the same comparison for a recorded checkpoint as soon
as files under its path are deleted or moved away (``DetectService``), and ``presence``
before tierd says a checkpoint is here on tier 0.

Files are reached through directory descriptors from the tier-0 root, no symlink
followed (``layout``): a recorded file behind a directory that became a symlink counts as
missing. A checkpoint whose tree cannot be walked (``unreadable``) is left unchecked for
this pass, warned about once; the other checkpoints are checked.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from tierd.daemon import checksum
from tierd.daemon.beneath import Root
from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.checkpoints import (
    complete_checkpoints_with_files,
    files_on_node,
    find_checkpoint,
    mark_checkpoint_changed,
    update_file_mtimes,
)
from tierd.daemon.catalog.db import Database, Session
from tierd.daemon.catalog.models import CheckpointState, File, Replica, ReplicaState
from tierd.daemon.catalog.part_replicas import (
    mark_part_deleted,
    mark_part_unverified,
    part_replica,
    parts_gone_from,
)
from tierd.daemon.catalog.replicas import first_tier_replica, mark_replica_deleted, mark_replica_failed
from tierd.daemon.detect.tree import exists, is_dir, stat_files, walk_tree
from tierd.daemon.detect.unreadable import Unreadable
from tierd.logs import get_logger

__all__ = [
    "CHANGED_ON_TIER0",
    "Change",
    "Recorded",
    "RecordedFile",
    "apply_change",
    "compare",
    "load_recorded",
]

log = get_logger(__name__)
_LIST_LIMIT = 50
ACTOR = "detector:reconcile"
#: The error of a tier-0 replica whose files changed after first sight.
CHANGED_ON_TIER0 = "files changed on tier 0 after they were recorded: copies come from a verified later tier"
#: The recorded checkpoints whose trees the change check could not walk.
UNCHECKED = Unreadable("checkpoint_unchecked")


@dataclass(frozen=True)
class RecordedFile:
    """A file as the catalog holds it."""

    id: int
    relpath: str
    size: int
    mtime_ns: int
    checksum: str


@dataclass(frozen=True)
class Recorded:
    """A complete checkpoint recorded on this node, with its files."""

    id: int
    run: str
    step: int
    relpath: str
    format: str
    files: tuple[RecordedFile, ...]
    #: This node's part, when the step spans nodes (its tier 0 holds only that part).
    part_id: int | None = None


@dataclass
class Change:
    """How a recorded checkpoint differs from the disk."""

    vanished: bool = False
    missing: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    touched: dict[int, int] = field(default_factory=dict)  # file id -> new mtime_ns

    @property
    def content_changed(self) -> bool:
        """Whether any byte of the checkpoint differs from what was recorded."""
        return bool(self.missing or self.modified or self.added)


def load_recorded(
    db: Database,
    node: str | None,
    *,
    ids: Collection[int] | None = None,
    paths: Collection[str] | None = None,
    changed_too: bool = False,
) -> list[Recorded]:
    """Every complete checkpoint ``node`` holds a part of, with that part's files (blocking).

    ``node`` None: every one (a shared tier 0). ``ids``, ``paths``: only those;
    ``changed_too``: ``changed`` ones as well (their path may vanish still).
    """
    states = (
        (CheckpointState.COMPLETE, CheckpointState.CHANGED) if changed_too else (CheckpointState.COMPLETE,)
    )
    with db.read_session() as session:
        rows = complete_checkpoints_with_files(session, node, ids=ids, paths=paths, states=states)
        return [
            Recorded(
                r.id,
                r.run.name,
                r.step,
                r.path,
                r.format,
                tuple(_recorded(f) for f in files_on_node(r, node)),
                next((p.id for p in r.parts if p.node == node and len(r.parts) > 1), None),
            )
            for r in rows
        ]


def _recorded(f: File) -> RecordedFile:
    return RecordedFile(f.id, f.relpath, f.size, f.mtime_ns, f.checksum)


def compare(rec: Recorded, tier0: Path) -> Change | None:
    """How the disk differs from ``rec`` (blocking; rehashes files whose mtime moved).

    None when nothing changed, or when the checkpoint's tree cannot be walked (warned once).
    """
    tree, top = Root(tier0), tier0 / rec.relpath
    try:
        change = _compare(rec, tree, top)
    except OSError as exc:
        UNCHECKED.failed(top, exc, tier0, run=rec.run, step=rec.step)
        return None
    UNCHECKED.read(top)
    return change


def _compare(rec: Recorded, tree: Root, top: Path) -> Change | None:
    tier0 = tree.top
    if not exists(top, tree):
        return Change(vanished=True)
    change = Change()
    stats = stat_files([tier0 / f.relpath for f in rec.files], tree)
    for f, st in zip(rec.files, stats, strict=True):
        if st is None:
            change.missing.append(f.relpath)
        elif st.size != f.size:
            change.modified.append(f.relpath)
        elif st.mtime_ns != f.mtime_ns:
            try:
                _, value = checksum.hash_file(st.path, root=tier0, single_link=True)
            except OSError:
                change.missing.append(f.relpath)
                continue
            if value == f.checksum:
                change.touched[f.id] = st.mtime_ns
            else:
                change.modified.append(f.relpath)
    if rec.format != "nvrx_local" and is_dir(top, tree):
        change.added = _added(top, tree, {f.relpath for f in rec.files})
    if change.content_changed or change.touched:
        return change
    return None


def _added(top: Path, tree: Root, known: Collection[str]) -> list[str]:
    """The regular files under ``top`` not in ``known``, as relpaths under tier 0, sorted.

    ``walk_tree``'s entries, their names joined as strings: no ``Path`` and no ``stat`` per
    file (a 5,000-file checkpoint's ``relative_to`` and ``as_posix`` were 15 % of a small
    hop's CPU, this check running beside the daemon's first hop).
    """
    start = len(os.fspath(tree.top).rstrip("/")) + 1
    added: list[str] = []
    for where, entries in walk_tree(top, tree):
        prefix = f"{os.fspath(where)[start:]}/"
        for item in entries:
            rel = prefix + item.name
            try:
                if rel not in known and item.is_file(follow_symlinks=False):
                    added.append(rel)
            except FileNotFoundError:
                continue
    added.sort()
    return added


def _part_vanished(session: Session, rec: Recorded, replica: Replica) -> bool:
    """Mark this node's part gone from tier 0; the step's copy is gone once every node's part is.

    Returns whether the step's tier-0 replica is now deleted.
    """
    if rec.part_id is not None:
        own = part_replica(session, rec.part_id, replica.tier)
        if own is not None and own.state != ReplicaState.DELETED.value:
            mark_part_deleted(own)
            why = "this node's part of the checkpoint is gone from its tier 0"
            append_event(
                session,
                actor=ACTOR,
                action="part_vanished",
                checkpoint_id=rec.id,
                tier=replica.tier,
                reason=why,
                detail={"path": rec.relpath, "part": rec.part_id},
            )
        if not parts_gone_from(session, rec.id, replica.tier):
            log.warning("part_vanished", run=rec.run, step=rec.step, path=rec.relpath)
            return False
    mark_replica_deleted(replica)
    return True


def _tier0_copy_changed(session: Session, rec: Recorded, replica: Replica) -> None:
    """Tier 0 no longer holds the first-sight bytes: its replica (and this node's part there) fails."""
    mark_replica_failed(replica, CHANGED_ON_TIER0)
    if rec.part_id is not None and (own := part_replica(session, rec.part_id, replica.tier)) is not None:
        mark_part_unverified(own, CHANGED_ON_TIER0)


def apply_change(db: Database, rec: Recorded, change: Change) -> None:
    """Write what ``compare`` found (blocking): mtimes, a ``changed`` state, or a vanished replica."""
    with db.session() as session:
        row = find_checkpoint(session, rec.id)
        if row is None or row.state not in (CheckpointState.COMPLETE.value, CheckpointState.CHANGED.value):
            return
        if row.state == CheckpointState.CHANGED.value and not change.vanished:
            return  # said once already; only its path vanishing is news
        replica = first_tier_replica(session, row.id)
        if replica is None or replica.state != ReplicaState.VERIFIED.value:
            return  # tier 0's copy is being deleted (or is gone): its files are meant to vanish
        if change.vanished:
            if not _part_vanished(session, rec, replica):
                return
            append_event(
                session,
                actor=ACTOR,
                action="vanished",
                checkpoint_id=row.id,
                tier=replica.tier,
                reason="the checkpoint's path is gone from tier 0 (removed by the training job?)",
                detail={"path": rec.relpath},
            )
            log.warning("checkpoint_vanished", run=rec.run, step=rec.step, path=rec.relpath)
            return
        update_file_mtimes(session, change.touched)
        if not change.content_changed:
            log.debug("checkpoint_touched", run=rec.run, step=rec.step, files=len(change.touched))
            return
        mark_checkpoint_changed(row)
        _tier0_copy_changed(session, rec, replica)
        detail = {
            "missing": change.missing[:_LIST_LIMIT],
            "modified": change.modified[:_LIST_LIMIT],
            "added": change.added[:_LIST_LIMIT],
        }
        append_event(
            session,
            actor=ACTOR,
            action="changed",
            checkpoint_id=row.id,
            reason="files changed after the checkpoint was recorded",
            detail=detail,
        )
        log.warning("checkpoint_changed", run=rec.run, step=rec.step, path=rec.relpath, **detail)
