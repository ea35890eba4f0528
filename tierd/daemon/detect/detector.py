"""The detector contract: what a format detector is given, what it finds and what it decides.

A *detector* recognises one checkpoint format among the entries of a directory
(``match``) and decides whether one candidate is complete (``inspect``). Both are
plain blocking functions over the file system (read through ``tree``), so tests call
them directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tierd.daemon.beneath import Root

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
    "trailing_int",
]

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
