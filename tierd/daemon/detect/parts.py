"""A node's part of a step that spans nodes: which files, and when they are stable.

On node-local tier 0 only one node holds a format's completion marker (DCP's ``.metadata``,
DeepSpeed's ``latest``, Megatron's tracker file); every other node holds shards and no
marker of its own. Such a part is recorded once its files are stable: no temporary name
left and nothing modified for the watch's settle time. A part the format itself vouches for
(a partial verdict: the coordinator's files beside ``.metadata``) needs no settle time.
Neither is ever complete on its own: the catalog decides completeness over every part.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from tierd.daemon.beneath import Root
from tierd.daemon.catalog.parts import Expectation
from tierd.daemon.detect.detector import (
    Candidate,
    Detector,
    FileStat,
    Settings,
    Verdict,
    incomplete,
    is_temp_name,
)
from tierd.daemon.detect.tree import is_dir, stat_file, stat_files, walk_files
from tierd.daemon.detect.unreadable import describe

__all__ = ["inspect_part", "late_files_verdict", "nodes_expected", "part_verdict"]


def part_verdict(
    path: Path, root: Root, verdict: Verdict, settings: Settings, now_ns: int | None = None
) -> Verdict:
    """``verdict`` as this node's part (partial), or an incomplete verdict saying when to look again.

    ``path`` is reached from ``root``. A complete verdict is returned as it is (the part is
    the whole checkpoint); a part whose tree cannot be read is incomplete. Blocking.
    """
    if verdict.complete or verdict.partial:
        return verdict
    try:
        files = _part_files(path, root)
    except OSError as exc:
        return incomplete(f"this node's part cannot be read: {describe(exc, path)}")
    if not files:
        return incomplete("no files of this node's part yet")
    if any(is_temp_name(f.path.name) for f in files):
        return incomplete(
            "a file of this node's part is still under a temporary name", settings.settle_seconds
        )
    now_ns = time.time_ns() if now_ns is None else now_ns
    age = (now_ns - max(f.mtime_ns for f in files)) / 1e9
    if age < settings.settle_seconds:
        return incomplete("this node's part is still being written", settings.settle_seconds - age + 0.05)
    reason = f"this node's part, unchanged for {settings.settle_seconds:g}s ({verdict.reason})"
    return Verdict(False, reason, files, partial=True, expected=verdict.expected, marker=verdict.marker)


def _part_files(path: Path, root: Root) -> tuple[FileStat, ...]:
    """The files at ``path``: a directory's (``walk_files``) or the file itself."""
    if is_dir(path, root):
        return tuple(walk_files(path, root))
    single = stat_file(path, root)
    return (single,) if single is not None else ()


def inspect_part(detector: Detector, candidate: Candidate, settings: Settings) -> Verdict:
    """The detector's verdict on ``candidate`` taken as this node's part (``part_verdict``)."""
    return part_verdict(candidate.path, candidate.root, detector.inspect(candidate, settings), settings)


def late_files_verdict(
    path: Path, root: Root, names: Sequence[str], settings: Settings, now_ns: int | None = None
) -> Verdict:
    """The files ``names`` (relative to ``path``, reached from ``root``) present here, partial once stable.

    They are files a step expects that appeared on this node after its part was recorded.
    Blocking.
    """
    files = tuple(f for f in stat_files([path / name for name in names], root) if f is not None)
    if not files:
        return incomplete("none of the step's missing files is here")
    if any(is_temp_name(f.path.name) for f in files):
        return incomplete("a late file is still under a temporary name", settings.settle_seconds)
    now_ns = time.time_ns() if now_ns is None else now_ns
    age = (now_ns - max(f.mtime_ns for f in files)) / 1e9
    if age < settings.settle_seconds:
        return incomplete("a late file is still being written", settings.settle_seconds - age + 0.05)
    reason = f"{len(files)} file(s) the step expects, written here after this node's part was recorded"
    return Verdict(False, reason, files, partial=True)


def nodes_expected(settings: Settings) -> Expectation | None:
    """The watch's ``nodes: N`` as an expectation (None for a single node)."""
    return Expectation(nodes=settings.nodes, source="config") if settings.nodes > 1 else None
