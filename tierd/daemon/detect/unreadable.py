"""Checkpoints whose tree cannot be walked: each fails alone, warned about once.

A subtree tierd cannot read (EACCES; a path of ``PATH_MAX`` bytes or more; a directory
swapped for a symlink while it was walked) fails only the checkpoint it belongs to: the
scan or the change check goes on with the others, and looks again at the next one. The
warning names the checkpoint and the reason once per checkpoint and reason; while it stays
so, later passes log it at debug level only.
"""

from __future__ import annotations

import errno
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tierd.daemon.detect.hostile import printable
from tierd.logs import get_logger

__all__ = ["MAX_REMEMBERED", "Unreadable", "describe", "shown"]

log = get_logger(__name__)

#: Unreadable checkpoints remembered (so each is warned about once, not at every pass).
MAX_REMEMBERED = 10_000
#: The most characters of a path a reason shows (a path near PATH_MAX would flood the log).
_SHOWN = 160


def shown(path: Path, top: Path) -> str:
    """``path`` below ``top`` (or whole, when it is not below), printable, shortened in the middle."""
    text = printable(path.relative_to(top).as_posix() if path.is_relative_to(top) else str(path))
    if len(text) <= _SHOWN:
        return text
    half = _SHOWN // 2
    return f"{text[:half]}...{text[-half:]} ({len(text)} characters)"


def describe(exc: OSError, top: Path) -> str:
    """``exc`` as a short, printable reason: what failed and where below ``top``."""
    code = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc)
    reason = f"{reason} ({code})" if code else reason
    if not isinstance(exc.filename, str) or Path(exc.filename) == top:
        return reason
    return f"{reason} at {shown(Path(exc.filename), top)}"


class Unreadable:
    """Remembers the checkpoints a walk failed on, to warn about each once per reason (thread-safe)."""

    def __init__(self, event: str = "checkpoint_unreadable") -> None:
        self.event = event
        self._seen: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def failed(self, path: Path, exc: OSError, top: Path, **fields: Any) -> str:
        """Log that the checkpoint at ``path`` (below ``top``) could not be read; returns the reason."""
        key, reason = str(path), describe(exc, path)
        with self._lock:
            known = self._seen.get(key) == reason
            self._seen[key] = reason
            self._seen.move_to_end(key)
            while len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)
        (log.debug if known else log.warning)(self.event, path=shown(path, top), reason=reason, **fields)
        return reason

    def read(self, path: Path) -> None:
        """The checkpoint at ``path`` was read: a later failure is warned about again."""
        with self._lock:
            self._seen.pop(str(path), None)
