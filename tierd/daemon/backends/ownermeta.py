"""A file's recorded owner, group and mode as an object's metadata, named as rclone names them.

rclone's local backend reads and writes ``mode`` (octal, with the file type: ``0100640``),
``uid`` and ``gid`` (decimal) as a file's metadata, and its object-store backends keep it as
the object's user metadata (``x-amz-meta-<name>`` headers on S3). tierd's S3, GCS and Azure
tiers use the same names and formats, so ``rclone copy --metadata`` from a tierd bucket to a
local disk gives the files their owners and modes back, and tierd reads those rclone wrote.
Metadata that is missing, or that no valid owner can be read from, is no owner (None), never
an error: the bytes are still the checkpoint's.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping

from tierd.daemon.backends.base import Ownership

__all__ = ["GID", "MODE", "UID", "owner_from_metadata", "owner_metadata"]

MODE = "mode"
UID = "uid"
GID = "gid"
#: chown's ids are 32-bit and (uid_t)-1 means "leave it": the largest id a file can have.
MAX_ID = 2**32 - 2


def owner_metadata(owner: Ownership | None) -> dict[str, str]:
    """The user metadata for ``owner`` (on S3: botocore's ``Metadata``, without ``x-amz-meta-``)."""
    if owner is None:
        return {}
    return {MODE: f"0{stat.S_IFREG | (owner.mode & 0o7777):o}", UID: str(owner.uid), GID: str(owner.gid)}


def owner_from_metadata(metadata: Mapping[str, str] | None) -> Ownership | None:
    """The owner ``metadata`` records (keys in any case); None if it records none (or none valid)."""
    if not metadata:
        return None
    fields = {key.lower(): value.strip() for key, value in metadata.items()}
    try:
        uid, gid, mode = int(fields[UID], 10), int(fields[GID], 10), int(fields[MODE], 8)
    except (KeyError, ValueError):
        return None
    if not (0 <= uid <= MAX_ID and 0 <= gid <= MAX_ID) or mode < 0:
        return None
    return Ownership(uid, gid, stat.S_IMODE(mode))
