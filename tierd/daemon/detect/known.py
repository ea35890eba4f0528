"""What the catalog already holds, kept in memory so scans skip it without a query."""

from __future__ import annotations

from dataclasses import dataclass

from tierd.daemon.catalog.checkpoints import recorded_steps, steps_awaiting_part, steps_to_grow
from tierd.daemon.catalog.db import Database

__all__ = ["KnownSteps", "Waiting", "load_growing", "load_known", "load_waiting"]


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
    """A waiting step this node owes a part to (announced, or another node's part recorded).

    ``spans``: the step is known to span nodes. ``unmarked``: this node recorded its part
    already, without the format's completion marker; only the marker landing there now
    (its detector calling the step complete) adds to it.
    """

    id: int
    run: str
    step: int
    relpath: str
    format: str
    spans: bool = False
    unmarked: bool = False


def load_known(db: Database, node: str | None = None) -> KnownSteps:
    """Every recorded (not waiting) checkpoint, and every step ``node`` recorded its part of (blocking)."""
    known = KnownSteps()
    for run, step, path, fmt in recorded_steps(db, node):
        known.add(run, step, path, fmt)
    return known


def load_waiting(db: Database, node: str) -> list[Waiting]:
    """The waiting steps ``node`` has no part of (blocking)."""
    return [Waiting(*row) for row in steps_awaiting_part(db, node)]


def load_growing(db: Database, node: str) -> list[Waiting]:
    """The waiting steps ``node`` recorded a part of (blocking)."""
    return [Waiting(*row) for row in steps_to_grow(db, node)]
