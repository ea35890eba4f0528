"""What tierd keeps with a GCS object, and how it reads it back.

An object's resource carries the service's own ``crc32c`` (big-endian, base64) and the
user ``metadata`` tierd wrote: ``crc64nvme`` (the checksum recorded at first sight, in the
catalog's text form), ``crc32c`` (the CRC32C of the same bytes, computed in the same pass
and declared with the upload so the service refused anything else), and the owner as
rclone names it (``mode``, ``uid``, ``gid``). ``verify`` needs no byte: the service's
``crc32c`` equal to the one tierd declared ties the stored bytes to the CRC64NVME beside it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from awscrt import checksums

from tierd.daemon.backends.base import ObjectInfo, Ownership
from tierd.daemon.backends.ownermeta import owner_from_metadata, owner_metadata

__all__ = [
    "CRC32C_KEY",
    "CRC64_KEY",
    "crc32c",
    "encode_crc32c",
    "info_from",
    "object_metadata",
    "stored_checksums",
]

CRC64_KEY = "crc64nvme"
CRC32C_KEY = "crc32c"


def crc32c(view: memoryview | bytes, previous: int = 0) -> int:
    """CRC32C of ``view`` continuing ``previous`` (awscrt's, hardware-accelerated)."""
    return int(checksums.crc32c(view, previous))


def encode_crc32c(value: int) -> str:
    """A CRC32C as GCS spells it: 4 big-endian bytes in base64."""
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def object_metadata(crc64: str, crc32: int, owner: Ownership | None) -> dict[str, str]:
    """The user metadata written with an object."""
    return {CRC64_KEY: crc64, CRC32C_KEY: encode_crc32c(crc32)} | owner_metadata(owner)


def stored_checksums(resource: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(CRC64NVME tierd recorded, CRC32C tierd declared, CRC32C the service computed)."""
    metadata = resource.get("metadata") or {}
    return metadata.get(CRC64_KEY), metadata.get(CRC32C_KEY), resource.get("crc32c")


def _mtime(resource: Mapping[str, Any]) -> float | None:
    text = resource.get("updated") or resource.get("timeCreated")
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def info_from(relpath: str, resource: Mapping[str, Any], *, with_checksum: bool) -> ObjectInfo:
    """The ObjectInfo of an object resource; its CRC64NVME only when ``with_checksum`` and vouched for.

    The recorded CRC64NVME is reported only when the service's CRC32C is the one declared
    beside it (an object rewritten by another tool keeps stale metadata otherwise).
    """
    crc64, declared, actual = stored_checksums(resource)
    checksum = crc64 if with_checksum and declared is not None and declared == actual else None
    return ObjectInfo(
        relpath=relpath,
        size=int(resource.get("size", 0)),
        checksum=checksum,
        mtime=_mtime(resource),
        owner=owner_from_metadata(resource.get("metadata")) if with_checksum else None,
    )
