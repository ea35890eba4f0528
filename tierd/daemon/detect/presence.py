"""Whether tier 0 still holds a recorded checkpoint, looked at before tierd says "it is here".

A job resuming (``ensure_local``, Lightning's ``resume_checkpoint``) takes tier 0's verified
replica for the files themselves; a wiped NVMe makes that a path to nothing. ``check_tier0``
looks first: each file this node's tier 0 holds of the step is ``lstat``ed from the tier's
root by directory descriptors (``nofollow.Opener``: nothing opened or read, no symlink
followed), one ``fstatat`` a file, and must be a regular file of its recorded size. When one
is not, the answer is "not here" (the caller restores from the next verified tier) and the
catalog is told, once, by the replica's own guard (only a ``verified`` one is marked):

- the step's path is gone (the NVMe wiped, ``rm -rf``): the reconcile's ``vanished``, the
  tier-0 replica (or this node's part) ``deleted`` and audited (``changes.apply_change``);
- some files gone or of another size: the replica ``failed``, as a scrub that finds files
  missing marks it (``mark_recheck_failed``: ``replica_mismatch`` per file, ``reverify_failed``).

Blocking: call it through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import errno
import stat
from dataclasses import dataclass
from pathlib import Path

from tierd.config import Config
from tierd.daemon.catalog.checkpoints import find_checkpoint
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.mismatches import mark_recheck_failed
from tierd.daemon.catalog.models import ReplicaState
from tierd.daemon.catalog.replicas import first_tier_replica
from tierd.daemon.detect.changes import Change, Recorded, apply_change, load_recorded
from tierd.daemon.nofollow import Opener
from tierd.errors import NotFound
from tierd.logs import get_logger

__all__ = ["MISSING_LISTED", "Tier0Presence", "check_tier0"]

log = get_logger(__name__)

#: At most this many files are named in the answer and the audit.
MISSING_LISTED = 50


@dataclass(frozen=True)
class Tier0Presence:
    """Whether this node's tier 0 holds the checkpoint now, and its tier-0 replica's state after."""

    checkpoint_id: int
    tier: str
    here: bool
    state: str | None
    location: str | None
    reason: str
    #: Files not there at their recorded size (the first ``MISSING_LISTED``).
    missing: tuple[str, ...] = ()


def check_tier0(db: Database, config: Config, checkpoint_id: int, *, actor: str) -> Tier0Presence:
    """Look at the checkpoint's files on this node's tier 0 (see the module docstring).

    Raises NotFound when there is no such checkpoint.
    """
    tier = config.tier0.name
    with db.read_session() as session:
        if find_checkpoint(session, checkpoint_id) is None:
            raise NotFound(f"checkpoint {checkpoint_id} does not exist")
        replica = first_tier_replica(session, checkpoint_id)
        state = replica.state if replica is not None else None
        location = replica.location if replica is not None else None
    if state != ReplicaState.VERIFIED.value:
        return Tier0Presence(
            checkpoint_id, tier, False, state, None, f"tier 0's replica is {state or 'absent'}"
        )
    node = None if config.tier0.shared else config.node
    found = load_recorded(db, node, ids=[checkpoint_id], changed_too=True)
    if not found:
        return Tier0Presence(
            checkpoint_id, tier, False, state, None, "this node's tier 0 holds no part of it"
        )
    rec = found[0]
    root = config.tier0.path.resolve()
    bad = _absent(rec, root)
    if not bad:
        return Tier0Presence(checkpoint_id, tier, True, state, location, "every file at its recorded size")
    reason = _record_absence(db, tier, rec, root, bad, actor)
    with db.read_session() as session:
        replica = first_tier_replica(session, checkpoint_id)
        after = replica.state if replica is not None else None
    missing = tuple(bad)[:MISSING_LISTED]
    return Tier0Presence(checkpoint_id, tier, False, after, None, reason, missing)


def _absent(rec: Recorded, root: Path) -> dict[str, str]:
    """Relpath -> what is wrong, for each file of ``rec`` not on tier 0 at its recorded size."""
    bad: dict[str, str] = {}
    with Opener(root) as opener:
        for f in rec.files:
            try:
                st = opener.stat(root / f.relpath)
            except OSError as exc:
                bad[f.relpath] = "missing" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else str(exc)
                continue
            if not stat.S_ISREG(st.st_mode):
                bad[f.relpath] = "not a regular file"
            elif st.st_size != f.size:
                bad[f.relpath] = f"holds {st.st_size} bytes, {f.size} recorded"
    return bad


def _gone(root: Path, relpath: str) -> bool:
    """Whether the checkpoint's own path is gone from tier 0."""
    with Opener(root) as opener:
        try:
            opener.stat(root / relpath)
        except FileNotFoundError:
            return True
        except OSError:
            return False
    return False


def _record_absence(
    db: Database, tier: str, rec: Recorded, root: Path, bad: dict[str, str], actor: str
) -> str:
    """Tell the catalog what ``_absent`` found; the reason for the answer."""
    if len(bad) == len(rec.files) and _gone(root, rec.relpath):
        apply_change(db, rec, Change(vanished=True))  # deleted, audited and warned as the reconcile does
        return "the checkpoint's path is gone from tier 0"
    checksums = {f.relpath: f.checksum for f in rec.files}
    files = [
        {
            "file": relpath,
            "problem": "missing",
            "expected": checksums[relpath],
            "actual": None,
            "detail": what,
        }
        for relpath, what in sorted(bad.items())[:MISSING_LISTED]
    ]
    error = f"{len(bad)} of {len(rec.files)} files not on tier 0 at their recorded size"
    with db.session() as session:
        marked = mark_recheck_failed(
            session, rec.id, tier, error=error, actor=actor, bad_files=files, part_id=rec.part_id
        )
    if marked:
        log.warning("tier0_files_missing", run=rec.run, step=rec.step, path=rec.relpath, files=files[:5])
    return error
