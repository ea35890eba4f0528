"""What an Azure blob carries as metadata: the file's CRC64NVME, owner, group and mode.

The owner fields are named and formatted as rclone names them (``mode`` in octal with the
file type, ``uid`` and ``gid`` in decimal), as for S3 (``s3.metadata``, not imported here:
importing it would load the S3 stack into a daemon of Azure tiers). ``crc64nvme`` holds the
whole file's CRC64NVME in the catalog's text form (base64 of 8 big-endian bytes), written
only once the service validated every block's CRC64 and their combination equalled it.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping

from tierd.daemon.backends.base import Ownership

__all__ = ["CRC64_KEY", "checksum_from_metadata", "blob_metadata", "owner_from_metadata"]

CRC64_KEY = "crc64nvme"
MAX_ID = 2**32 - 2


def blob_metadata(crc: str, owner: Ownership | None) -> dict[str, str]:
    """The metadata a blob is written with."""
    found = {CRC64_KEY: crc}
    if owner is not None:
        found |= {
            "mode": f"0{stat.S_IFREG | (owner.mode & 0o7777):o}",
            "uid": str(owner.uid),
            "gid": str(owner.gid),
        }
    return found


def checksum_from_metadata(metadata: Mapping[str, str] | None) -> str | None:
    """The CRC64NVME a blob's metadata records, or None."""
    if not metadata:
        return None
    fields = {key.lower(): value for key, value in metadata.items()}
    return fields.get(CRC64_KEY)


def owner_from_metadata(metadata: Mapping[str, str] | None) -> Ownership | None:
    """The owner the metadata records; None when it records none (or none that is valid)."""
    if not metadata:
        return None
    fields = {key.lower(): value.strip() for key, value in metadata.items()}
    try:
        uid, gid, mode = int(fields["uid"], 10), int(fields["gid"], 10), int(fields["mode"], 8)
    except (KeyError, ValueError):
        return None
    if not (0 <= uid <= MAX_ID and 0 <= gid <= MAX_ID) or mode < 0:
        return None
    return Ownership(uid, gid, stat.S_IMODE(mode))
