"""What every detector shares: candidates, verdicts, directory listings and file walks.

A *detector* recognises one checkpoint format among the entries of a directory
(``match``) and decides whether one candidate is complete (``inspect``). Both are
plain blocking functions over the file system, so tests call them directly.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tierd.daemon.backends.posix.remove import TRASH_SUFFIX
from tierd.daemon.nofollow import read_regular

__all__ = [
    "Candidate",
    "Detector",
    "Entry",
    "FileStat",
    "Listing",
    "Settings",
    "Verdict",
    "incomplete",
    "is_temp_name",
    "list_dir",
    "read_file",
    "stat_file",
    "trailing_int",
    "walk_files",
]

#: The most a detector reads of a metadata file (``trainer_state.json``, ``latest``, ...).
READ_LIMIT = 64 * 1024 * 1024
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
    """The entries of one directory, by name."""

    path: Path
    entries: Mapping[str, Entry]

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


def list_dir(path: Path) -> Listing:
    """List ``path`` with one ``scandir``; an unreadable or vanished directory lists empty.

    A checkpoint tierd is deleting (renamed to ``.<name>.tierd-deleting``) is not listed.
    """
    entries: dict[str, Entry] = {}
    try:
        with os.scandir(path) as it:
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
    return Listing(path, entries)


def read_file(path: Path, limit: int = READ_LIMIT) -> bytes:
    """A metadata file's bytes, never through a symlink nor from a FIFO or device (``nofollow``).

    Raises OSError when it is missing, a symlink (ELOOP), not a regular file (ENOENT) or
    longer than ``limit`` (EFBIG).
    """
    return read_regular(path, limit)


def stat_file(path: Path) -> FileStat | None:
    """Size and mtime of a regular file; None when it is missing or not a regular file."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return FileStat(path, st.st_size, st.st_mtime_ns)


def walk_files(root: Path) -> list[FileStat]:
    """Every regular file under ``root`` (recursively, symlinks skipped), sorted by path."""
    found: list[FileStat] = []
    stack = [root]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                for item in it:
                    try:
                        if item.is_dir(follow_symlinks=False):
                            stack.append(Path(item.path))
                        elif item.is_file(follow_symlinks=False):
                            st = item.stat(follow_symlinks=False)
                            found.append(FileStat(Path(item.path), st.st_size, st.st_mtime_ns))
                    except FileNotFoundError:
                        continue
        except (FileNotFoundError, NotADirectoryError):
            continue
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
