"""The notify path: a training job says "step N is at PATH" and tierd records it now.

If a detector recognises the layout it still gets the last word: when it says files are
missing (or the marker is not there) the step is recorded ``waiting`` and the watcher
completes it once the detector agrees. A layout no detector recognises is recorded at
once with every file under the path. Below the tier-0 root everything is reached through
directory descriptors (``layout``); a step whose tree cannot be read is refused (422)
naming the reason.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierd.daemon.aio import blocking
from tierd.daemon.beneath import Root, lstat_in
from tierd.daemon.catalog.checkpoints import checkpoint_state, step_id_and_state
from tierd.daemon.catalog.models import CheckpointState
from tierd.daemon.catalog.parts import Expectation
from tierd.daemon.context import Context
from tierd.daemon.detect.detector import Settings, Verdict, incomplete
from tierd.daemon.detect.hostile import check_checkpoint, printable
from tierd.daemon.detect.parts import inspect_part, part_verdict
from tierd.daemon.detect.record import Outcome, record_checkpoint, write_refused, write_waiting
from tierd.daemon.detect.registry import detectors_for
from tierd.daemon.detect.scan import RootSpec, detect_path
from tierd.daemon.detect.tree import is_dir, stat_file, walk_files
from tierd.daemon.detect.unreadable import describe
from tierd.errors import NotifyRejected, Refused, Unstable
from tierd.logs import get_logger

__all__ = ["NotifyResult", "notify_checkpoint", "resolve_in_tier0"]

log = get_logger(__name__)


@dataclass(frozen=True)
class NotifyResult:
    """The HTTP status to answer with and the checkpoint's id."""

    status: int
    checkpoint_id: int


def resolve_in_tier0(path: str, tier0: Path) -> Path:
    """Where ``path`` (absolute, or relative to the tier-0 root) lies in tier 0 (blocking).

    Below the root nothing is resolved as a whole path: the components are taken as given and
    looked up through directory descriptors, so a symlink the job placed on the way (or at
    the end) is refused, not followed to another run's step. Raises NotifyRejected when it lies
    outside tier 0 (or is its root, or holds ``..``), does not exist, goes through a symlink,
    or is no path this system can look up (a NUL, a name too long).
    """
    root = tier0.resolve()
    outside = NotifyRejected(f"path {path!r} is not inside the tier-0 root {root}")
    try:
        parts = _parts_below(Path(path), tier0, root)
        if not parts or ".." in parts:
            raise outside
        with Root(root).open(parts[:-1]) as directory:
            found = lstat_in(directory, parts[-1])
    except FileNotFoundError:
        found = None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotifyRejected(f"path {path!r} goes through a symlink or a file: not followed") from None
        raise NotifyRejected(f"path {path!r} cannot be looked up: {exc}") from None
    except ValueError as exc:
        raise NotifyRejected(f"path {path!r} cannot be looked up: {exc}") from None
    if found is None:
        raise NotifyRejected(f"path {path!r} does not exist")
    if stat.S_ISLNK(found.st_mode):
        raise NotifyRejected(f"path {path!r} is a symlink: tierd follows none in tier 0")
    return root.joinpath(*parts)


def _parts_below(given: Path, tier0: Path, root: Path) -> tuple[str, ...]:
    """``given``'s components below the tier-0 root, taken lexically; raises NotifyRejected."""
    if not given.is_absolute():
        return given.parts
    for anchor in (root, Path(os.path.normpath(tier0.absolute()))):
        if given.is_relative_to(anchor):
            return given.relative_to(anchor).parts
    # The root as the job knows it, through a symlink above it (/scratch -> /mnt/nvme/scratch):
    # only a path above the root is resolved, and only to find where the root begins.
    for above in given.parents:
        try:
            if above.resolve() == root:
                return given.relative_to(above).parts
        except (OSError, RuntimeError):  # a symlink loop above: not the root
            continue
    raise NotifyRejected(f"path {str(given)!r} is not inside the tier-0 root {root}")


def _whole_path(target: Path, root: Root) -> Verdict:
    try:
        if is_dir(target, root):
            return Verdict(True, "announced by the job", tuple(walk_files(target, root)))
        st = stat_file(target, root)
    except OSError as exc:
        return incomplete(f"cannot be read: {describe(exc, target)}")
    return Verdict(st is not None, "announced by the job", (st,) if st else ())


def _settings_for(ctx: Context, target: Path) -> Settings:
    for watch in ctx.config.watch:
        spec = RootSpec.of(watch, ctx.config.tier0.path)
        if target.is_relative_to(spec.path):
            return spec.settings
    return Settings()


async def notify_checkpoint(
    ctx: Context,
    *,
    run: str,
    step: int,
    path: str,
    fmt: str | None,
    actor: str,
    detail: Mapping[str, Any] | None = None,
    expect: Expectation | None = None,
) -> NotifyResult:
    """Record (or mark waiting) the step the job announced; raises NotifyRejected, CatalogError.

    A checkpoint holding what tierd will not read (``hostile``) is refused: the audit log
    gets a ``refused`` event and NotifyRejected says why. ``detail`` (what the job said
    beside the step, e.g. its world size) joins the audit event's. ``expect`` (its world
    size, its file list) says the step may span nodes: what this node holds is recorded as
    its part, and the step completes when every part is in.
    """
    tier0 = ctx.config.tier0.path.resolve()
    target = await blocking(resolve_in_tier0, path, tier0)
    relpath = target.relative_to(tier0).as_posix()
    announced = _Announced(run, step, target, relpath, fmt, actor, dict(detail or {}), expect or None)
    try:
        return await _notify(ctx, announced)
    except OSError as exc:  # a directory of the step that cannot be walked (EACCES, too deep, swapped)
        raise NotifyRejected(f"path {path!r} cannot be read: {describe(exc, target)}") from None
    except Refused as exc:
        name = fmt or "auto"
        await blocking(
            write_refused, ctx.db, refused=exc, run=run, step=step, fmt=name, relpath=relpath, actor=actor
        )
        log.warning("notify_refused", run=run, step=step, path=printable(relpath), reason=str(exc))
        raise NotifyRejected(str(exc)) from None


@dataclass(frozen=True)
class _Announced:
    """What the job's notify call said, resolved inside tier 0."""

    run: str
    step: int
    target: Path
    relpath: str
    fmt: str | None
    actor: str
    extra: dict[str, Any]
    expect: Expectation | None


async def _notify(ctx: Context, a: _Announced) -> NotifyResult:
    existing = await blocking(step_id_and_state, ctx.db, a.run, a.step)
    if existing is not None and existing[1] != CheckpointState.WAITING.value:
        return NotifyResult(200, existing[0])
    root = Root(ctx.config.tier0.path.resolve())
    await blocking(check_checkpoint, root.top, a.relpath, ())
    settings = _settings_for(ctx, a.target)
    detectors = detectors_for(a.fmt or "auto", settings.marker)
    found = await blocking(detect_path, a.target, root, detectors, settings, a.step)
    if found is None and a.fmt in (None, "auto"):
        verdict, name, recheck = await blocking(_whole_path, a.target, root), "unknown", None
    elif found is None:
        return await _wait(ctx, a, str(a.fmt), f"not recognised as {a.fmt}")
    else:
        detector, candidate, verdict = found
        name = detector.name
        recheck = functools.partial(detector.inspect, candidate, settings) if candidate else None
        if not verdict.complete and a.expect is not None and candidate is not None:
            verdict = await blocking(part_verdict, candidate.path, root, verdict, settings)
            recheck = functools.partial(inspect_part, detector, candidate, settings)
        if not verdict.complete and not verdict.partial:
            return await _wait(ctx, a, name, verdict.reason)
    try:
        outcome, checkpoint_id = await record_checkpoint(
            ctx,
            verdict,
            run=a.run,
            step=a.step,
            fmt=name,
            relpath=a.relpath,
            actor=a.actor,
            action="notified",
            recheck=recheck,
            detail=a.extra,
            expect=a.expect,
        )
    except Unstable as exc:
        return await _wait(ctx, a, name, str(exc))
    status = {Outcome.EXISTING: 200, Outcome.PART: 202}.get(outcome, 201)
    return NotifyResult(status, checkpoint_id)


async def _wait(ctx: Context, a: _Announced, fmt: str, reason: str) -> NotifyResult:
    log.warning("notify_disagrees", run=a.run, step=a.step, path=a.relpath, format=fmt, reason=reason)
    _, checkpoint_id = await blocking(
        write_waiting,
        ctx.db,
        ctx.config,
        run=a.run,
        step=a.step,
        fmt=fmt,
        relpath=a.relpath,
        actor=a.actor,
        reason=reason,
        detail=a.extra,
        expect=a.expect,
    )
    ctx.wake_waiting()  # this node's sweep looks at the step now, and every few seconds while it waits
    state = await blocking(checkpoint_state, ctx.db, checkpoint_id)
    return NotifyResult(202 if state == CheckpointState.WAITING.value else 200, checkpoint_id)
