"""CRC64NVME of transfer buffers: small ones on the loop, big ones on the I/O pool."""

from __future__ import annotations

from collections.abc import Sequence

from awscrt import checksums

from tierd.daemon import checksum
from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.concurrency import blocking_on

__all__ = ["INLINE_HASH_LIMIT", "combine_all", "crc64"]

INLINE_HASH_LIMIT = 1 * MIB  # below this a thread hop costs more than the hash


def _crc(view: memoryview, previous: int) -> int:
    return int(checksums.crc64nvme(view, previous))


async def crc64(view: memoryview, previous: int = 0) -> int:
    """CRC64NVME of ``view`` continuing ``previous``; big buffers hash off the loop."""
    if len(view) <= INLINE_HASH_LIMIT:
        return _crc(view, previous)
    return await blocking_on(view, _crc, previous)


def combine_all(pieces: Sequence[tuple[int, int]]) -> int:
    """The CRC of consecutive pieces given as (crc, length) in order."""
    total = 0
    for crc, length in pieces:
        total = checksum.combine(total, crc, length)
    return total
