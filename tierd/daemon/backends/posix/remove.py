"""Removing a checkpoint from a POSIX tier so that it never looks complete while half removed.

When the checkpoint's directory holds exactly the files tierd recorded, it is renamed out
of sight first (``.<name>.tierd-deleting``, one atomic rename, the parent fsynced), then
removed; a crash in between leaves only the hidden directory, which the next attempt finds
and finishes. When it holds anything else (files written after it was recorded, or other
steps' files, as in a session directory of nvidia-resiliency-ext), only the recorded files
go, completion markers first, and emptied directories are pruned: tierd never removes a
file it did not record. Nor a directory above the checkpoint: on tier 0 that is the training
job's (a run's directory, often a watched one, which must outlive its last checkpoint).

Everything is done through directory descriptors from the tier's root
(``tierd.daemon.beneath``): a directory of the checkpoint swapped for a symlink (to
``/victim``) after it was recorded is never followed, so its target is never touched; the
recorded files behind it are unreachable, hence not removed, and the symlink stays.
Blocking: call through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Sequence

from tierd.daemon.beneath import Dir, Place, Root, lstat_in, walk

__all__ = ["TRASH_SUFFIX", "prune", "remove_checkpoint_tree", "trash_name", "unlink_and_prune"]

TRASH_SUFFIX = ".tierd-deleting"
#: errnos meaning "not reachable without following a symlink" (or not a directory at all).
_UNREACHABLE = frozenset({errno.ENOTDIR, errno.ELOOP, errno.ENOENT})


def trash_name(name: str) -> str:
    """What a checkpoint directory named ``name`` is renamed to while it is being removed."""
    return f".{name}{TRASH_SUFFIX}"


def remove_checkpoint_tree(root: Root, top: tuple[str, ...], ordered: Sequence[Place]) -> None:
    """Remove the checkpoint at ``top`` (components below the root); ``ordered``: its files, markers first.

    Raises OSError when something reachable cannot be removed.
    """
    above, name = top[:-1], top[-1]
    try:
        parent = root.open(above)
    except OSError as exc:
        if exc.errno in _UNREACHABLE:
            return  # gone, or behind a symlink: nothing of ours is reachable there
        raise
    with parent:
        trash = trash_name(name)
        seen = lstat_in(parent, name)
        if seen is not None and stat.S_ISDIR(seen.st_mode) and _holds_exactly(parent, name, top, ordered):
            _rmtree_in(parent, trash)  # a removal cut short earlier, under the same name
            os.rename(name, trash, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
            root.forget(top)
            parent.fsync()
        if _rmtree_in(parent, trash):
            parent.fsync()
            return
    for place in ordered:
        unlink_in(root, place)
    for parts in sorted({p.parts for p in ordered}, key=len, reverse=True):
        prune(root, parts, len(above))


def unlink_and_prune(root: Root, place: Place, stop: int = 0) -> bool:
    """Unlink one file (missing is fine) and prune the directories it emptied; whether it was there.

    Directories are pruned while more than ``stop`` components below the root (the root
    itself never goes). Raises OSError when the file is there and cannot be removed.
    """
    if not unlink_in(root, place):
        return False
    prune(root, place.parts, stop)
    return True


def unlink_in(root: Root, place: Place) -> bool:
    """Unlink ``place`` reached without a symlink, and fsync its directory; False when unreachable.

    A directory at that name is left (EISDIR is raised, as unlink would).
    """
    try:
        directory = root.open(place.parts)
    except OSError as exc:
        if exc.errno in _UNREACHABLE:
            return False
        raise
    with directory:
        try:
            os.unlink(place.name, dir_fd=directory.fd)
        except FileNotFoundError:
            return False
        directory.fsync()
    return True


def prune(root: Root, parts: tuple[str, ...], stop: int = 0) -> None:
    """Remove the directory ``parts`` and its parents while they are empty and deeper than ``stop``."""
    while len(parts) > max(stop, 0):
        try:
            with root.open(parts[:-1]) as parent:
                os.rmdir(parts[-1], dir_fd=parent.fd)  # ENOTDIR for a symlink: never followed
        except OSError:
            return  # not empty, gone, or not ours
        root.forget(parts)
        parts = parts[:-1]


def _rmtree_in(parent: Dir, name: str) -> bool:
    """Remove the directory ``name`` in ``parent`` and all below it; False when it is not a directory.

    ``shutil.rmtree`` with ``dir_fd`` walks by descriptors and refuses a symlink at the top.
    """
    seen = lstat_in(parent, name)
    if seen is None or not stat.S_ISDIR(seen.st_mode):
        return False
    shutil.rmtree(name, dir_fd=parent.fd)
    return True


def _holds_exactly(parent: Dir, name: str, top: tuple[str, ...], files: Sequence[Place]) -> bool:
    """Whether the tree ``name`` in ``parent`` is the recorded files and nothing else.

    A symlink, a FIFO or anything not a regular file or a directory counts as something
    else; so does a directory that cannot be read.
    """
    wanted = {(*place.parts[len(top) :], place.name) for place in files if place.parts[: len(top)] == top}
    if len(wanted) != len(files):
        return False
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)
    except OSError:
        return False
    seen = 0
    with Dir(fd, parent.path / name) as below:
        try:
            for parts, _, entries in walk(below):
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        continue
                    if not entry.is_file(follow_symlinks=False) or (*parts, entry.name) not in wanted:
                        return False
                    seen += 1
        except OSError:
            return False
    return seen == len(wanted)
