"""A restore's progress: bytes and files done, the files placed, rate and time left."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tierd.daemon.transfer.spec import FileSpec

__all__ = ["Meter"]


class Meter:
    """Counts what a restore has done; ``snapshot`` is what its job's detail shows.

    Files found already in place count as done but not toward the rate (no bytes moved).
    """

    def __init__(
        self, bytes_total: int, files_total: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.bytes_total = bytes_total
        self.files_total = files_total
        self.clock = clock
        self.started = clock()
        self.finished = 0  # bytes of files done
        self.skipped = 0  # bytes of files found in place
        self.files = 0
        self.inflight: dict[str, int] = {}
        self.resuming = False
        #: name under the destination root -> the catalog's file id
        self.file_ids: dict[str, int] = {}
        self.placed_all: set[str] = set()
        self._placed: list[str] = []
        self._saved = 0

    def counter(self, name: str, size: int) -> Callable[[int | None], None]:
        """The byte counter of one file's copy (``None`` restarts it)."""

        def count(nbytes: int | None) -> None:
            done = 0 if nbytes is None else self.inflight.get(name, 0) + nbytes
            self.inflight[name] = min(size, done)

        return count

    def finish(self, spec: FileSpec, *, skipped: bool) -> None:
        """``spec`` is in place: written now, or (``skipped``) found there already."""
        self.inflight.pop(spec.relpath, None)
        self.finished += spec.size
        self.files += 1
        if skipped:
            self.skipped += spec.size
        else:
            self.placed_all.add(spec.relpath)
            self._placed.append(spec.relpath)

    @property
    def bytes_done(self) -> int:
        """Bytes in place or on their way."""
        return self.finished + sum(self.inflight.values())

    def placed_since_saved(self) -> tuple[list[str], int]:
        """Files placed since the last confirmed save, and the mark to ``saved`` once recorded."""
        upto = len(self._placed)
        return self._placed[self._saved : upto], upto

    def saved(self, upto: int) -> None:
        """The files placed up to ``upto`` are recorded."""
        self._saved = max(self._saved, upto)

    def snapshot(self) -> dict[str, Any]:
        """bytes/files done and total, rate (bytes per second moved by this run) and ETA."""
        elapsed = self.clock() - self.started
        moved = self.bytes_done - self.skipped
        rate = moved / elapsed if elapsed > 0 and moved > 0 else None
        left = max(self.bytes_total - self.bytes_done, 0)
        return {
            "bytes_done": self.bytes_done,
            "files_done": self.files,
            "bytes_total": self.bytes_total,
            "files_total": self.files_total,
            "rate_bytes_per_second": round(rate, 1) if rate is not None else None,
            "eta_seconds": round(left / rate, 2) if rate else None,
        }
