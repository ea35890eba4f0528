"""What a file to copy is, as the catalog recorded it at first sight: ``FileSpec``."""

from __future__ import annotations

from dataclasses import dataclass

from tierd.daemon.backends.base import Ownership, recorded_owner
from tierd.daemon.catalog.models import File

__all__ = ["FileSpec"]


@dataclass(frozen=True)
class FileSpec:
    """A file to copy, with the checksum, owner and mode recorded at first sight."""

    relpath: str
    size: int
    checksum: str
    mtime_ns: int
    owner: Ownership | None = None  # None: recorded before tierd kept owners

    @classmethod
    def of(cls, row: File) -> FileSpec:
        """The spec of a catalog file row."""
        return cls(
            row.relpath, row.size, row.checksum, row.mtime_ns, recorded_owner(row.uid, row.gid, row.mode)
        )
