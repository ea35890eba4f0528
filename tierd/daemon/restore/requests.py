"""Asking for a restore and cancelling one: the checks and catalog writes behind the API.

Both block (catalog and file system): call them through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierd.config import Config
from tierd.daemon.catalog import restores
from tierd.daemon.catalog.checkpoints import checkpoints_at
from tierd.daemon.catalog.db import Database, Session
from tierd.daemon.catalog.models import ReplicaState
from tierd.daemon.catalog.replicas import replicas_by_tier
from tierd.daemon.restore.cleanup import remove_restored
from tierd.daemon.restore.destination import layout_of, of_part, roots_of
from tierd.daemon.restore.paths import anchored, check_target, is_fresh
from tierd.errors import Conflict, RestoreRefused

__all__ = ["RestoreRequest", "cancel_restore", "clean_up", "request_restore"]


@dataclass(frozen=True)
class RestoreRequest:
    """What a caller asks for (the API's RestoreIn, once its shape is checked)."""

    checkpoint_id: int | None = None
    run: str | None = None
    step: int | None = None
    latest: bool = False
    target: str | None = None
    to_tier0: bool = False
    files: Sequence[str] | None = None
    ranks: Sequence[int] | None = None
    #: Only this node's part of the step (the files it recorded).
    node: str | None = None
    source_tier: str | None = None
    overwrite: bool = False
    #: (uid, gid) to give the restored files and directories to (their recorded modes kept);
    #: None: each keeps its recorded owner. Who may ask is the API's to check.
    owner: tuple[int, int] | None = None


def request_restore(db: Database, config: Config, request: RestoreRequest, *, actor: str) -> int:
    """Check ``request`` and queue the restore; returns its id.

    Raises NotFound (checkpoint or run), Conflict (nothing verified to restore from, or not
    on ``source_tier``), RestoreRefused (the target, a tier name or the selection).
    """
    with db.session() as session:
        checkpoint = restores.resolve_checkpoint(
            session,
            checkpoint_id=request.checkpoint_id,
            run=request.run,
            step=request.step,
            latest=request.latest,
        )
        if request.to_tier0:
            roots, wanted = [config.tier0.path], str(config.tier0.path / checkpoint.path)
        else:
            roots, wanted = config.restore_roots, request.target or ""
        target = check_target(wanted, roots, overwrite=request.overwrite)
        _check_not_in_checkpoint(session, config, target, checkpoint.id)
        _check_source(session, config, checkpoint.id, request.source_tier)
        files = restores.file_sizes(session, checkpoint.id)
        detail = _detail(config, request, target, roots)
        relpaths = of_part(session, checkpoint.id, detail, [relpath for relpath, _ in files])
        if not relpaths:
            raise RestoreRefused(f"node: {request.node!r} recorded no part of checkpoint {checkpoint.id}")
        layout = layout_of(config, checkpoint.path, relpaths, detail)
        chosen = [size for relpath, size in files if relpath in layout.names]
        if not chosen:
            raise RestoreRefused(
                f"no file of checkpoint {checkpoint.id} matches the files and ranks asked for"
            )
        detail |= {
            "files_total": len(chosen),
            "bytes_total": sum(chosen),
            "files_done": 0,
            "bytes_done": 0,
            "fallbacks": [],
        }
        return restores.create_restore(session, checkpoint, detail, actor=actor).id


def _detail(config: Config, request: RestoreRequest, target: Path, roots: Sequence[Path]) -> dict[str, Any]:
    """The restore job's ``detail``: who restores it, and the request as checked."""
    return {
        "node": config.node,
        "target": str(target),
        "to_tier0": request.to_tier0,
        "files": list(request.files) if request.files is not None else None,
        "ranks": sorted(set(request.ranks)) if request.ranks is not None else None,
        "part_of": request.node,
        "source_tier": request.source_tier,
        "overwrite": request.overwrite,
        "owner": None if request.owner is None else {"uid": request.owner[0], "gid": request.owner[1]},
        "fresh": is_fresh(anchored(target, roots)),
    }


def _check_not_in_checkpoint(session: Session, config: Config, target: Path, own: int) -> None:
    """Refuse a target that is, or lies inside, a checkpoint recorded on tier 0 (but is ``own``'s path).

    Writing there would change a recorded step's bytes while the catalog still shows them
    verified. The restored checkpoint's own path is its own bytes put back (``to: tier0``, or
    a job's ``ensure_local`` after tier 0 lost them). Raises RestoreRefused.
    """
    tier0 = Path(os.path.realpath(config.tier0.path))
    if target != tier0 and tier0 not in target.parents:
        return
    parts = target.relative_to(tier0).parts
    above = ["/".join(parts[:n]) for n in range(1, len(parts))]
    found = checkpoints_at(session, above) + [
        i for i in checkpoints_at(session, ["/".join(parts)]) if i != own
    ]
    if found:
        raise RestoreRefused(
            f"target {target} is, or lies inside, checkpoint {found[0]} recorded on tier {config.tier0.name}"
        )


def _check_source(session: Session, config: Config, checkpoint_id: int, tier: str | None) -> None:
    if tier is None:
        return
    if tier not in {t.name for t in config.tiers}:
        raise RestoreRefused(f"source_tier {tier!r} is not a configured tier")
    replica = replicas_by_tier(session, checkpoint_id).get(tier)
    if replica is None or replica.state != ReplicaState.VERIFIED.value:
        raise Conflict(f"checkpoint {checkpoint_id} has no verified replica on tier {tier}")


def cancel_restore(
    db: Database, config: Config, job_id: int, *, actor: str, reason: str, clean: bool
) -> bool:
    """Cancel the restore, and with ``clean`` remove what it wrote; returns whether it was open.

    Raises NotFound, Conflict (the restore is done or failed).
    """
    with db.session() as session:
        was_open = restores.cancel_restore(session, job_id, actor=actor, reason=reason)
    if was_open and clean:
        clean_up(db, config, job_id)
    return was_open


def clean_up(db: Database, config: Config, job_id: int) -> int:
    """Remove what restore ``job_id`` wrote (see ``cleanup``); returns how many files went."""
    with db.read_session() as session:
        record = restores.restore_record(session, job_id)
        if record is None:
            return 0
        checkpoint_id = restores.get_restore(session, job_id).job.checkpoint_id
        detail, path, relpaths, placed = record
        relpaths = of_part(session, checkpoint_id, detail, relpaths)
    try:
        layout = layout_of(config, path, relpaths, detail)
    except RestoreRefused:
        return 0  # names that could never have been written
    names = [layout.name_of(r) for r in layout.names]
    try:
        tree = layout.tree(roots_of(config, detail))
    except RestoreRefused:
        return 0  # the allowed roots changed since: nothing there is the restore's any more
    return remove_restored(
        tree,
        layout.target_parts(),
        names,
        fresh=bool(detail.get("fresh")),
        placed={layout.name_of(r) for r in placed if r in layout.names},
    )
