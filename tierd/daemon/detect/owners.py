"""The owner, group and mode of a checkpoint's directories at first sight.

A copy or restore creates the directories a checkpoint's files lie in; to give each the
owner and mode it had on tier 0, detection records them beside the files' (``HashedFile``):
every directory holding a recorded file, and every one above it up to the tier-0 root (the
run's directory, which a restore ``to: tier0`` may have to create too).

Each is reached from the root one component at a time (``openat`` with ``O_PATH |
O_NOFOLLOW | O_DIRECTORY``) and ``fstat``-ed: a directory swapped for a symlink fails
(ENOTDIR, ELOOP) instead of reporting what it points to. Blocking: call through ``blocking``.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DirectoryStat", "directories_holding", "stat_directories"]

_DIR_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)


@dataclass(frozen=True)
class DirectoryStat:
    """A directory's path relative to the tier-0 root, owner, group and permission bits."""

    relpath: str
    uid: int
    gid: int
    mode: int


def directories_holding(relpaths: Iterable[str]) -> list[str]:
    """Every directory that holds one of the files ``relpaths``, and every one above it (the root excluded).

    Sorted so that a directory comes right after its parent's subtree begins (by components).
    """
    found: set[str] = set()
    for relpath in relpaths:
        directory = posixpath.dirname(relpath)
        while directory and directory not in found:
            found.add(directory)
            directory = posixpath.dirname(directory)
    return sorted(found, key=lambda d: d.split("/"))


def stat_directories(root: Path, relpaths: Iterable[str]) -> tuple[DirectoryStat, ...]:
    """``DirectoryStat`` of each of ``directories_holding(relpaths)``, walked from ``root`` without symlinks.

    Raises OSError: ENOTDIR or ELOOP when a directory on the way is a symlink (or no
    directory), ENOENT when one is gone.
    """
    found: list[DirectoryStat] = []
    stack: list[tuple[str, int]] = []  # the open directories from the root down to the last one
    base = os.open(root, os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY))
    try:
        for relpath in directories_holding(relpaths):
            parent = posixpath.dirname(relpath)
            while stack and stack[-1][0] != parent:
                os.close(stack.pop()[1])
            fd = os.open(posixpath.basename(relpath), _DIR_FLAGS, dir_fd=stack[-1][1] if stack else base)
            stack.append((relpath, fd))
            st = os.fstat(fd)
            found.append(DirectoryStat(relpath, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
    finally:
        for _, fd in stack:
            os.close(fd)
        os.close(base)
    return tuple(found)
