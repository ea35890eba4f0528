"""What every detector shares: candidates, verdicts, directory listings and file walks.

A *detector* recognises one checkpoint format among the entries of a directory
(``match``) and decides whether one candidate is complete (``inspect``). Both are
plain blocking functions over the file system, so tests call them directly.

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
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tierd.daemon.backends.posix.remove import TRASH_SUFFIX
from tierd.daemon.beneath import Dir, Root, lstat_in, walk
from tierd.daemon.nofollow import read_regular

__all__ = [
    "Candidate",
    "Detector",
    "Entry",
    "FileStat",
    "Listing",
    "PATH_MAX",
    "Settings",
    "Verdict",
    "exists",
    "incomplete",
    "is_dir",
    "is_temp_name",
    "list_dir",
    "lstat_path",
    "read_file",
    "stat_file",
    "stat_files",
    "trailing_int",
    "walk_files",
    "walk_tree",
]

#: The most a detector reads of a metadata file (``trainer_state.json``, ``latest``, ...).
READ_LIMIT = 64 * 1024 * 1024
#: Linux's PATH_MAX, the NUL included: a walk refuses a tree holding a longer path.
PATH_MAX = 4096
_TEMP_SUFFIXES = (".tmp", "~", ".partial", ".part", ".temp", ".swp", ".incomplete", ".dirty.pt")
_TEMP_INFIXES = (".tmp.", ".tmp-", ".orbax-checkpoint-tmp", ".ferrytmp")


@dataclass(frozen=True)
class Settings:
    """The per-root knobs detectors read: the marker file name, the settle time, the nodes."""

    marker: str | None = None
    settle_seconds: float = 30.0
    #: How many nodes write each step (each its own part on its node-local tier 0).
    nodes: int = 1


@dataclass(frozen=True)
class Entry:
    """One directory entry, as seen by a single ``scandir`` (symlinks are not followed)."""

    name: str
    is_dir: bool
    is_file: bool


@dataclass(frozen=True)
class Listing:
    """The entries of one directory, by name, and the tree it was listed from."""

    path: Path
    entries: Mapping[str, Entry]
    #: Where ``path`` is reached from (its entries are reached the same way).
    root: Root = field(kw_only=True)

    def has_file(self, name: str) -> bool:
        """Whether ``name`` is a regular file here."""
        entry = self.entries.get(name)
        return entry is not None and entry.is_file

    def has_dir(self, name: str) -> bool:
        """Whether ``name`` is a directory here."""
        entry = self.entries.get(name)
        return entry is not None and entry.is_dir


@dataclass(frozen=True)
class FileStat:
    """A file of a checkpoint: absolute path, size and modification time."""

    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Candidate:
    """Something a detector recognised as a checkpoint of its format, complete or not.

    ``path`` is the checkpoint directory (or single file); ``key`` tells apart candidates
    that share a path (nvidia-resiliency-ext keeps every iteration in one directory).
    """

    format: str
    path: Path
    step: int | None
    key: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Where ``path`` is reached from (``Listing.root`` of the listing it was found in).
    root: Root = field(kw_only=True)


@dataclass(frozen=True)
class Verdict:
    """Whether a candidate is complete; when it is, the files that make it up.

    ``retry_after`` (seconds) asks to look again even if no file system event comes.
    A *partial* verdict is not complete: its files are this node's part of a step that
    spans nodes, and ``expected`` (names relative to the candidate) what the format's own
    metadata says the whole step holds. ``marker``: the format's completion marker names
    this step (a DeepSpeed or Megatron tracker) though this node lacks other ranks' files.
    """

    complete: bool
    reason: str
    files: tuple[FileStat, ...] = ()
    retry_after: float | None = None
    #: Figures of merit the format itself wrote for the step (the HF Trainer's eval metrics).
    metrics: Mapping[str, float] = field(default_factory=dict)
    partial: bool = False
    expected: tuple[str, ...] | None = None
    marker: bool = False

    @property
    def vouched(self) -> bool:
        """Whether the format's own marker or metadata is in this node's files (or says so)."""
        return self.complete or self.marker or self.expected is not None


def incomplete(reason: str, retry_after: float | None = None) -> Verdict:
    """A verdict of "not complete yet" with its reason."""
    return Verdict(False, reason, (), retry_after)


class Detector(Protocol):
    """One checkpoint format."""

    name: str

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """The candidates ``entry`` (a child of ``parent``) makes up; None if it is not this format.

        An empty list claims the entry (it is not descended into) without a candidate,
        e.g. a temporary directory that will be renamed.
        """
        ...

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Decide whether ``candidate`` is complete now; never raises for missing files."""
        ...


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


_TRAILING_INT = re.compile(r"(\d+)(?!.*\d)")


def trailing_int(name: str) -> int | None:
    """The last run of digits in ``name``, or None."""
    found = _TRAILING_INT.search(name)
    return int(found.group(1)) if found else None


def is_temp_name(name: str) -> bool:
    """Whether ``name`` looks like a file still being written under a temporary name."""
    if name.startswith((".", "#")) or name.endswith(_TEMP_SUFFIXES):
        return True
    return any(infix in name for infix in _TEMP_INFIXES)
