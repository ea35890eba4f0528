"""What the catalog already holds, kept in memory so scans skip it without a query."""

from __future__ import annotations

from dataclasses import dataclass

from tierd.daemon.catalog.checkpoints import recorded_steps, waiting_steps
from tierd.daemon.catalog.db import Database

__all__ = ["KnownSteps", "Waiting", "load_known", "load_waiting"]


class KnownSteps:
    """Recorded (run, step) pairs and checkpoint paths.

    Read from worker threads, written only on the event loop: membership tests need no lock.
    """

    def __init__(self) -> None:
        self._steps: set[tuple[str, int]] = set()
        self._paths: set[str] = set()

    def has_path(self, relpath: str) -> bool:
        """Whether a recorded checkpoint has this path."""
        return relpath in self._paths

    def has_step(self, run: str, step: int) -> bool:
        """Whether the run's step is recorded."""
        return (run, step) in self._steps

    def add(self, run: str, step: int, relpath: str, fmt: str) -> None:
        """Remember a recorded checkpoint (a shared nvrx session path is not one checkpoint)."""
        self._steps.add((run, step))
        if fmt != "nvrx_local":
            self._paths.add(relpath)

    def __len__(self) -> int:
        return len(self._steps)


@dataclass(frozen=True)
class Waiting:
    """A step announced by the notify call whose files the detector did not accept yet."""

    id: int
    run: str
    step: int
    relpath: str
    format: str


def load_known(db: Database) -> KnownSteps:
    """Every recorded (not waiting) checkpoint in the catalog (blocking)."""
    known = KnownSteps()
    for run, step, path, fmt in recorded_steps(db):
        known.add(run, step, path, fmt)
    return known


def load_waiting(db: Database, node: str) -> list[Waiting]:
    """The waiting checkpoints of ``node`` (blocking)."""
    return [Waiting(*row) for row in waiting_steps(db, node)]
