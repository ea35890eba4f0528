"""Walking a watched root: which entries are checkpoints, and which of those are complete.

``scan_root`` walks a whole root (the reconcile scan); ``scan_chain`` looks only at the
directories between the root and the directory a file system event came from, so a
burst of events costs a few ``scandir`` calls. Both are blocking: run them off the loop.

Everything below the watched directory is reached through directory descriptors from it
(``RootSpec.root``, see ``layout``). A candidate whose tree cannot be read (``unreadable``)
is left out of this pass, warned about once; the pass goes on with the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tierd.config import WatchConfig
from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import Candidate, Detector, Entry, Listing, Settings, Verdict, incomplete
from tierd.daemon.detect.registry import detectors_for
from tierd.daemon.detect.tree import list_dir
from tierd.daemon.detect.unreadable import Unreadable, describe
from tierd.logs import get_logger

__all__ = ["MAX_DEPTH", "Found", "Known", "RootSpec", "detect_path", "scan_chain", "scan_root"]

log = get_logger(__name__)

#: How deep below a root a checkpoint may sit (run_pattern layouts nest a few levels).
MAX_DEPTH = 8


class Known(Protocol):
    """What is already recorded, so a scan skips it without opening it again."""

    def has_path(self, relpath: str) -> bool:
        """Whether a recorded checkpoint has this path (relative to the tier-0 root)."""
        ...

    def has_step(self, run: str, step: int) -> bool:
        """Whether the run's step is recorded (complete or changed)."""
        ...


@dataclass(frozen=True)
class RootSpec:
    """A watched root, resolved: its path, how it names runs, and its detectors.

    ``root`` reaches what lies below ``path`` through descriptors; ``unreadable`` remembers
    the candidates its scans could not read.
    """

    path: Path
    tier0: Path
    run: str | None
    run_pattern: re.Pattern[str] | None
    format: str
    detectors: tuple[Detector, ...]
    settings: Settings
    root: Root
    unreadable: Unreadable = field(default_factory=Unreadable, compare=False)

    @classmethod
    def of(cls, watch: WatchConfig, tier0: Path) -> RootSpec:
        """Build from a ``watch`` entry of the configuration."""
        pattern = re.compile(watch.run_pattern) if watch.run_pattern else None
        path = watch.path.resolve()
        return cls(
            path=path,
            tier0=tier0.resolve(),
            root=Root(path),
            run=watch.run,
            run_pattern=pattern,
            format=watch.format,
            detectors=detectors_for(watch.format, watch.marker),
            settings=Settings(marker=watch.marker, settle_seconds=watch.settle_seconds, nodes=watch.nodes),
        )

    def run_for(self, path: Path) -> str | None:
        """The run a checkpoint at ``path`` belongs to (None if ``run_pattern`` does not match)."""
        if self.run is not None:
            return self.run
        assert self.run_pattern is not None
        m = self.run_pattern.match(path.relative_to(self.path).as_posix())
        return m.group("run") if m and m.group("run") else None

    def relpath(self, path: Path) -> str:
        """``path`` relative to the tier-0 root, as the catalog stores it."""
        return path.relative_to(self.tier0).as_posix()


@dataclass(frozen=True)
class Found:
    """A candidate that is not recorded yet, with the run, step and verdict it got."""

    candidate: Candidate
    detector: Detector
    run: str
    step: int
    relpath: str
    verdict: Verdict


def _inspect(spec: RootSpec, detector: Detector, candidate: Candidate, known: Known) -> Found | None:
    if candidate.step is None:
        log.debug("checkpoint_without_step", path=str(candidate.path), format=detector.name)
        return None
    run = spec.run_for(candidate.path)
    if run is None:
        log.debug("checkpoint_without_run", path=str(candidate.path), pattern=spec.run_pattern)
        return None
    if known.has_step(run, candidate.step):
        return None
    verdict = detector.inspect(candidate, spec.settings)
    return Found(candidate, detector, run, candidate.step, spec.relpath(candidate.path), verdict)


def _claim(spec: RootSpec, listing: Listing, entry: Entry, known: Known, out: list[Found]) -> bool:
    """Offer ``entry`` to the detectors in order; True when one claims it.

    An entry or candidate that cannot be read is claimed and left out (``unreadable``).
    """
    path = listing.path / entry.name
    if known.has_path(spec.relpath(path)):
        return True
    for detector in spec.detectors:
        try:
            candidates = detector.match(entry, listing, spec.settings)
        except OSError as exc:
            spec.unreadable.failed(path, exc, spec.path, format=detector.name)
            return True
        if candidates is None:
            continue
        for candidate in candidates:
            try:
                found = _inspect(spec, detector, candidate, known)
            except OSError as exc:
                spec.unreadable.failed(candidate.path, exc, spec.path, format=detector.name)
                continue
            spec.unreadable.read(candidate.path)
            if found is not None:
                out.append(found)
        return True
    return False


def _list(spec: RootSpec, directory: Path) -> Listing:
    """``directory``'s listing; empty (and warned about) when it cannot be read."""
    try:
        return list_dir(directory, spec.root)
    except OSError as exc:
        spec.unreadable.failed(directory, exc, spec.path)
        return Listing(directory, {}, root=spec.root)


def scan_root(spec: RootSpec, known: Known) -> list[Found]:
    """Every unrecorded checkpoint under the root, complete or not (blocking)."""
    out: list[Found] = []
    stack: list[tuple[Path, int]] = [(spec.path, 0)]
    while stack:
        directory, depth = stack.pop()
        listing = _list(spec, directory)
        for name in sorted(listing.entries):
            entry = listing.entries[name]
            if not _claim(spec, listing, entry, known, out) and entry.is_dir and depth < MAX_DEPTH:
                stack.append((directory / name, depth + 1))
    return out


def scan_chain(spec: RootSpec, directory: Path, known: Known) -> list[Found]:
    """The unrecorded checkpoints an event in ``directory`` can have changed (blocking).

    Walks from the root towards ``directory``; stops at the first entry a detector
    claims (the event is inside that checkpoint). If none does, every entry of
    ``directory`` itself is offered (the event was a marker such as ``latest``).
    """
    out: list[Found] = []
    try:
        parts = directory.relative_to(spec.path).parts
    except ValueError:
        return out
    current = spec.path
    for part in parts[:MAX_DEPTH]:
        listing = _list(spec, current)
        entry = listing.entries.get(part)
        if entry is None:
            return out
        if _claim(spec, listing, entry, known, out):
            return out
        current = current / part
    listing = _list(spec, current)
    for name in sorted(listing.entries):
        _claim(spec, listing, listing.entries[name], known, out)
    return out


def detect_path(
    path: Path, root: Root, detectors: tuple[Detector, ...], settings: Settings, step: int | None = None
) -> tuple[Detector, Candidate | None, Verdict] | None:
    """The first detector that recognises ``path`` (reached from ``root``) and its verdict; None if none does.

    Among several candidates at one path (nvidia-resiliency-ext), the one of ``step``. A
    checkpoint whose tree cannot be read gets an incomplete verdict saying why.
    """
    listing = list_dir(path.parent, root)
    entry = listing.entries.get(path.name)
    if entry is None:
        return None
    for detector in detectors:
        chosen: Candidate | None = None
        try:
            candidates = detector.match(entry, listing, settings)
            if candidates is None:
                continue
            if not candidates:
                return detector, None, Verdict(False, "a temporary name of this format")
            chosen = next((c for c in candidates if c.step == step), candidates[0])
            return detector, chosen, detector.inspect(chosen, settings)
        except OSError as exc:
            return detector, chosen, incomplete(f"cannot be read: {describe(exc, path)}")
    return None
