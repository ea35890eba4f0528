"""Orbax (``orbax/checkpoint/_src/path/atomicity.py``, ``CheckpointManager``).

What it does: the primary host creates ``<step>.orbax-checkpoint-tmp`` (older versions
add ``-<timestamp>``), writes ``_CHECKPOINT_METADATA`` with ``init_timestamp_nsecs``
into it, every host writes its items (each item in its own ``<item>.orbax-checkpoint-tmp``
renamed when done); to finalize it adds ``commit_timestamp_nsecs`` to
``_CHECKPOINT_METADATA`` and then either renames the directory to ``<step>``
(``AtomicRenameTemporaryPath``, the default) or, with ``CommitFileTemporaryPath``
(object stores, or when configured), writes in place and ends with ``commit_success.txt``.

Complete when: the name has no tmp suffix, nothing inside has one, and
``commit_success.txt`` exists or ``_CHECKPOINT_METADATA`` holds ``commit_timestamp_nsecs``
(a directory with neither file comes from an Orbax old enough to commit by rename only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import (
    Candidate,
    Entry,
    Listing,
    Settings,
    Verdict,
    incomplete,
    trailing_int,
)
from tierd.daemon.detect.tree import list_dir, read_file, walk_files
from tierd.daemon.markers import CHECKPOINT_METADATA, COMMIT_SUCCESS

__all__ = ["TMP_SUFFIX", "OrbaxDetector"]

TMP_SUFFIX = ".orbax-checkpoint-tmp"
_STEP_NAME = re.compile(r"^(?:.*_)?(\d+)$")
_ITEM_MARKERS = ("_METADATA", "manifest.ocdbt", "_sharding", "checkpoint")


def _is_orbax_step(path: Path, root: Root) -> bool:
    listing = list_dir(path, root)
    if listing.has_file(CHECKPOINT_METADATA) or listing.has_file(COMMIT_SUCCESS):
        return True
    for name, entry in listing.entries.items():
        if TMP_SUFFIX in name:
            return True
        if entry.is_dir and any(list_dir(path / name, root).has_file(m) for m in _ITEM_MARKERS):
            return True
    return False


def _committed(path: Path, root: Root) -> tuple[bool, str]:
    listing = list_dir(path, root)
    if listing.has_file(COMMIT_SUCCESS):
        return True, f"{COMMIT_SUCCESS} written"
    if not listing.has_file(CHECKPOINT_METADATA):
        return True, "renamed into place (no step metadata)"
    try:
        data = json.loads(read_file(path / CHECKPOINT_METADATA, root))
    except (OSError, ValueError):
        return False, f"{CHECKPOINT_METADATA} is not complete JSON yet"
    if isinstance(data, dict) and data.get("commit_timestamp_nsecs"):
        return True, f"{CHECKPOINT_METADATA} holds commit_timestamp_nsecs"
    return False, f"{CHECKPOINT_METADATA} has no commit timestamp yet"


class OrbaxDetector:
    """``<step>/`` directories of an Orbax ``CheckpointManager``."""

    name = "orbax"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim step directories with Orbax metadata, and every tmp directory (never complete)."""
        if not entry.is_dir:
            return None
        if TMP_SUFFIX in entry.name:
            return []
        if not _STEP_NAME.match(entry.name):
            return None
        path = parent.path / entry.name
        if not _is_orbax_step(path, parent.root):
            return None
        return [Candidate(self.name, path, trailing_int(entry.name), str(path), root=parent.root)]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete once committed by rename or commit file, with no tmp part left inside."""
        ok, reason = _committed(candidate.path, candidate.root)
        if not ok:
            return incomplete(reason)
        files = walk_files(candidate.path, candidate.root)
        for f in files:
            if TMP_SUFFIX in str(f.path.relative_to(candidate.path)):
                return incomplete(f"{f.path.parent.name} is still a temporary item")
        return Verdict(True, reason, tuple(files))
