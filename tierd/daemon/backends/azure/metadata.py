"""What an Azure blob carries as metadata: the file's CRC64NVME, owner, group and mode.

The owner fields are named and formatted as rclone names them (``backends.ownermeta``, as
on every store). ``crc64nvme`` holds the
whole file's CRC64NVME in the catalog's text form (base64 of 8 big-endian bytes), written
only once the service validated every block's CRC64 and their combination equalled it.
"""

from __future__ import annotations

from collections.abc import Mapping

from tierd.daemon.backends.base import Ownership
from tierd.daemon.backends.ownermeta import owner_metadata

__all__ = ["CRC64_KEY", "blob_metadata", "checksum_from_metadata"]

CRC64_KEY = "crc64nvme"


def blob_metadata(crc: str, owner: Ownership | None) -> dict[str, str]:
    """The metadata a blob is written with."""
    return {CRC64_KEY: crc} | owner_metadata(owner)


def checksum_from_metadata(metadata: Mapping[str, str] | None) -> str | None:
    """The CRC64NVME a blob's metadata records, or None."""
    if not metadata:
        return None
    fields = {key.lower(): value for key, value in metadata.items()}
    return fields.get(CRC64_KEY)
