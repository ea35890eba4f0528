"""Any other layout: a directory is complete once the configured marker file is in it.

The job must create the marker after everything else is durable (write it under a
temporary name and rename it, or fsync the data first). The marker is recorded as one
of the checkpoint's files, so a restored copy carries its own completion proof.
"""

from __future__ import annotations

from tierd.daemon.detect.detector import (
    Candidate,
    Entry,
    Listing,
    Settings,
    Verdict,
    incomplete,
    trailing_int,
)
from tierd.daemon.detect.tree import list_dir, walk_files

__all__ = ["MarkerDetector"]


class MarkerDetector:
    """Directories holding the root's ``marker`` file."""

    name = "marker"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim a directory once the marker is in it (before that it is indistinguishable)."""
        if not entry.is_dir or not settings.marker:
            return None
        path = parent.path / entry.name
        if not list_dir(path, parent.root).has_file(settings.marker):
            return None
        return [Candidate(self.name, path, trailing_int(entry.name), str(path), root=parent.root)]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete while the marker is there."""
        if not settings.marker or not list_dir(candidate.path, candidate.root).has_file(settings.marker):
            return incomplete(f"marker {settings.marker!r} is not there")
        files = walk_files(candidate.path, candidate.root)
        return Verdict(True, f"marker {settings.marker} present", tuple(files))
