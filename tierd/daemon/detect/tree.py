"""Reading a watched tree: directory listings, file walks, ``stat`` and metadata reads.

Tier 0 is written by training jobs, so nothing below a watched directory is named to the
kernel by a whole path: every listing, walk, ``stat`` and read starts from a
``beneath.Root`` (the watched directory, or the tier-0 root) and goes down one component
at a time through directory descriptors, no symlink followed. Paths (``Listing.path``,
``Candidate.path``, ``FileStat.path``) stay absolute, for messages and the catalog. A walk
refuses (ENAMETOOLONG) a tree holding a path of ``PATH_MAX`` bytes or more, as the kernel
would: no job, restore or catalog row could name such a file whole. A listing keeps one
descriptor open per directory, and a file costs one ``fstatat`` on it, as ``scandir`` and
``lstat`` by whole path did.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from tierd.daemon.backends.posix.remove import TRASH_SUFFIX
from tierd.daemon.beneath import Dir, Root, lstat_in, walk
from tierd.daemon.detect.detector import Entry, FileStat, Listing
from tierd.daemon.nofollow import read_regular

__all__ = [
    "PATH_MAX",
    "exists",
    "is_dir",
    "list_dir",
    "lstat_path",
    "read_file",
    "stat_file",
    "stat_files",
    "walk_files",
    "walk_tree",
]

#: The most a detector reads of a metadata file (``trainer_state.json``, ``latest``, ...).
READ_LIMIT = 64 * 1024 * 1024
#: Linux's PATH_MAX, the NUL included: a walk refuses a tree holding a longer path.
PATH_MAX = 4096


def list_dir(path: Path, root: Root) -> Listing:
    """List ``path`` (reached from ``root``) with one ``scandir``; unreadable or vanished lists empty.

    A symlink on the way, or at ``path`` itself, lists empty too: it is never followed.
    A checkpoint tierd is deleting (renamed to ``.<name>.tierd-deleting``) is not listed.
    """
    entries: dict[str, Entry] = {}
    try:
        with root.open(root.relparts(path)) as directory, os.scandir(directory.fd) as it:
            for item in it:
                if item.name.endswith(TRASH_SUFFIX):
                    continue
                try:
                    is_dir = item.is_dir(follow_symlinks=False)
                    is_file = item.is_file(follow_symlinks=False)
                except OSError:
                    continue
                entries[item.name] = Entry(item.name, is_dir, is_file)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        pass
    return Listing(path, entries, root=root)


def read_file(path: Path, root: Root, limit: int = READ_LIMIT) -> bytes:
    """A metadata file's bytes, reached from ``root``: never through a symlink, nor from a FIFO.

    Raises OSError when it is missing, a symlink (ELOOP; ENOTDIR for a directory on the
    way), not a regular file (ENOENT) or longer than ``limit`` (EFBIG).
    """
    return read_regular(path, limit, root)


def lstat_path(path: Path, root: Root) -> os.stat_result | None:
    """``lstat`` of ``path`` through its directory's descriptor; None when it is not there.

    A symlink or a file on the way makes it not there. Raises OSError when it cannot tell
    (EACCES on the way).
    """
    parts = root.relparts(path)
    try:
        if not parts:
            with root.open() as top:
                return os.fstat(top.fd)
        with root.open(parts[:-1]) as directory:
            return lstat_in(directory, parts[-1])
    except (FileNotFoundError, NotADirectoryError):
        return None


def exists(path: Path, root: Root) -> bool:
    """Whether ``path`` is there, reached from ``root`` (a symlink there is; one on the way is not).

    Raises OSError when it cannot tell (EACCES on the way).
    """
    return lstat_path(path, root) is not None


def is_dir(path: Path, root: Root) -> bool:
    """Whether ``path``, reached from ``root``, is a directory (a symlink to one is not).

    Raises OSError when it cannot tell (EACCES on the way).
    """
    st = lstat_path(path, root)
    return st is not None and stat.S_ISDIR(st.st_mode)


def stat_file(path: Path, root: Root) -> FileStat | None:
    """Size and mtime of a regular file; None when it is missing or not a regular file."""
    return stat_files((path,), root)[0]


def stat_files(paths: Iterable[Path], root: Root) -> list[FileStat | None]:
    """``stat_file`` of each of ``paths``; consecutive paths in one directory share its descriptor."""
    found: list[FileStat | None] = []
    opened: tuple[str, ...] | None = None
    directory: Dir | None = None
    try:
        for path in paths:
            try:
                parts = root.relparts(path)
            except OSError:
                parts = ()
            if not parts:
                found.append(None)
                continue
            if parts[:-1] != opened:
                if directory is not None:
                    directory.close()
                opened, directory = parts[:-1], _open_or_none(root, parts[:-1])
            found.append(_regular_in(directory, path, parts[-1]))
    finally:
        if directory is not None:
            directory.close()
    return found


def _open_or_none(root: Root, parts: tuple[str, ...]) -> Dir | None:
    try:
        return root.open(parts)
    except OSError:
        return None


def _regular_in(directory: Dir | None, path: Path, name: str) -> FileStat | None:
    if directory is None:
        return None
    try:
        st = os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return FileStat(path, st.st_size, st.st_mtime_ns)


def walk_tree(path: Path, root: Root) -> Iterator[tuple[Path, list[os.DirEntry[str]]]]:
    """Every directory at and below ``path`` (reached from ``root``), with its entries sorted by name.

    Subdirectories are opened from their parent's descriptor, no symlink followed
    (``beneath.walk``); an entry's ``stat(follow_symlinks=False)`` is taken through that
    descriptor and only while the walk stands at its directory. Yields nothing when
    ``path`` is missing or not a directory (a symlink included). Raises OSError when a
    directory below cannot be opened or read (EACCES; ENOTDIR: it became a symlink or a
    file meanwhile), and ENAMETOOLONG, before going further, at a directory holding a name
    whose path would reach ``PATH_MAX``.
    """
    try:
        top = root.open(root.relparts(path))
    except (FileNotFoundError, NotADirectoryError):
        return
    with top:
        for parts, _, entries in walk(top):
            where = path.joinpath(*parts)
            _check_length(where, entries)
            yield where, entries


def _check_length(where: Path, entries: list[os.DirEntry[str]]) -> None:
    """Raise OSError(ENAMETOOLONG) when a path of ``where``'s entries reaches ``PATH_MAX``."""
    longest = max((len(os.fsencode(e.name)) for e in entries), default=0)
    if longest and len(os.fsencode(where)) + 1 + longest >= PATH_MAX:
        raise OSError(errno.ENAMETOOLONG, f"a path below is {PATH_MAX} bytes or longer", str(where))


def walk_files(path: Path, root: Root) -> list[FileStat]:
    """Every regular file under ``path`` (``walk_tree``: symlinks skipped), sorted by path.

    Raises OSError like ``walk_tree`` when a subtree cannot be walked.
    """
    found: list[FileStat] = []
    for where, entries in walk_tree(path, root):
        for item in entries:
            try:
                if not item.is_file(follow_symlinks=False):
                    continue
                st = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            found.append(FileStat(where / item.name, st.st_size, st.st_mtime_ns))
    found.sort(key=lambda f: str(f.path))
    return found
