"""Removing a checkpoint from a POSIX tier so that it never looks complete while half removed.

When the checkpoint's directory holds exactly the files tierd recorded, it is renamed out
of sight first (``.<name>.tierd-deleting``, one atomic rename, the parent fsynced), then
removed; a crash in between leaves only the hidden directory, which the next attempt finds
and finishes. When it holds anything else (files written after it was recorded, or other
steps' files, as in a session directory of nvidia-resiliency-ext), only the recorded files
go, completion markers first, and emptied directories are pruned: tierd never removes a
file it did not record. Nor a directory above the checkpoint: on tier 0 that is the training
job's (a run's directory, often a watched one, which must outlive its last checkpoint).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tierd.daemon.backends.posix.dirsync import fsync_dir

__all__ = ["TRASH_SUFFIX", "remove_checkpoint_tree", "trash_path", "unlink_and_prune"]

TRASH_SUFFIX = ".tierd-deleting"


def trash_path(top: Path) -> Path:
    """Where ``top`` goes while it is being removed."""
    return top.with_name(f".{top.name}{TRASH_SUFFIX}")


def remove_checkpoint_tree(root: Path, top: Path, ordered: Sequence[Path]) -> None:
    """Remove the checkpoint at ``top`` (blocking); ``ordered`` are its recorded files, markers first."""
    trash = trash_path(top)
    if top.is_dir() and not top.is_symlink() and _holds_exactly(top, ordered):
        if trash.exists():
            shutil.rmtree(trash)  # a removal cut short earlier, under the same name
        os.rename(top, trash)
        fsync_dir(top.parent)
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash)
        fsync_dir(trash.parent)
        return
    above = top.parent if root in top.parents else root
    for path in ordered:
        _unlink(path)
    for parent in sorted({p.parent for p in ordered}, key=lambda p: len(p.parts), reverse=True):
        _prune(above, parent)


def unlink_and_prune(root: Path, path: Path) -> None:
    """Unlink one file (missing is fine) and prune the directories it emptied, up to ``root``."""
    if _unlink(path):
        _prune(root, path.parent)


def _holds_exactly(top: Path, files: Sequence[Path]) -> bool:
    """Whether the tree under ``top`` is the recorded files and nothing else (symlinks count as else)."""
    wanted = {os.fspath(p) for p in files}
    seen = 0
    for dirpath, dirnames, filenames in os.walk(top):
        for name in filenames:
            if os.path.join(dirpath, name) not in wanted:
                return False
            seen += 1
        if any(os.path.islink(os.path.join(dirpath, d)) for d in dirnames):
            return False
    return seen == len(wanted)


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def _prune(root: Path, directory: Path) -> None:
    """Remove ``directory`` and its parents below ``root`` while they are empty."""
    while directory != root and root in directory.parents:
        try:
            os.rmdir(directory)
        except OSError:
            return  # not empty, or gone
        directory = directory.parent
