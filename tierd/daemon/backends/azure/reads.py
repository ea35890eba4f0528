"""Reading blobs: ranged GETs pinned to the ETag seen at open, and parallel read-back hashing.

Every ranged read after the opening one carries ``If-Match`` with the ETag the opening GET
saw, so all of a reader's bytes come from one version of the blob (a 412 means it changed:
the next try opens it again). A read-back hashes ``READBACK_RANGE`` ranges in parallel and
combines their CRCs; each range's bytes are charged to the buffer budget while held.

A blob in the Archive access tier answers every read with 409 ``BlobArchived``, which
``azure.errors`` turns into ``ObjectArchived``: a restore from it is refused with that
reason at once, never left waiting for the hours a rehydration takes.
"""

from __future__ import annotations

from azure.core import MatchConditions
from azure.storage.blob.aio import BlobClient

from tierd.daemon import checksum
from tierd.daemon.backends.azure.errors import azure_errors
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.hashing import combine_all, crc64
from tierd.errors import TransientBackendError

__all__ = ["OPEN_RANGE", "READBACK_RANGE", "AzureReader", "fill", "hash_blob"]

#: What ``open_reader``'s GET asks for: a small blob whole.
OPEN_RANGE = 256 * 1024
READBACK_RANGE = 8 * MIB


async def fill(blob: BlobClient, offset: int, view: memoryview, etag: str | None, location: str) -> None:
    """Fill ``view`` with the blob's bytes from ``offset`` (one GET, ``If-Match`` ``etag``).

    Raises TransientBackendError when the body ends early or the blob changed (412).
    """
    got = 0
    with azure_errors("read", location):
        condition = MatchConditions.IfNotModified if etag else None
        downloader = await blob.download_blob(
            offset=offset, length=len(view), etag=etag, match_condition=condition
        )
        async for chunk in downloader.chunks():
            n = min(len(chunk), len(view) - got)
            view[got : got + n] = chunk[:n]
            got += n
    if got != len(view):
        raise TransientBackendError(f"read {location}: got {got} of {len(view)} bytes at {offset}")


class AzureReader:
    """A RangeReader over one version of a blob; ``head`` holds its first bytes (a small one whole)."""

    def __init__(self, blob: BlobClient, size: int, etag: str | None, head: bytes, location: str) -> None:
        self._blob, self.size, self._etag, self._location = blob, size, etag, location
        self._head = memoryview(head)

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` from ``offset`` (fewer bytes only at the end).

        Raises NotFound if the blob vanished, TransientBackendError if it changed since open.
        """
        want = min(len(buf), self.size - offset)
        if want <= 0:
            return 0
        got = max(0, min(want, len(self._head) - offset))
        if got:
            buf[:got] = self._head[offset : offset + got]
        if got < want:
            await fill(self._blob, offset + got, buf[got:want], self._etag, self._location)
        return want

    async def close(self) -> None:
        """Forget the first bytes (connections belong to the client)."""
        self._head = memoryview(b"")


async def hash_blob(
    blob: BlobClient, size: int, etag: str | None, *, concurrency: int, budget: ByteBudget, location: str
) -> str:
    """CRC64NVME of the whole blob (``size`` bytes), ranges read back in parallel."""
    starts = list(range(0, size, READBACK_RANGE))
    pieces = [(0, min(READBACK_RANGE, size - start)) for start in starts]

    async def one(index: int) -> None:
        length = pieces[index][1]
        async with budget.buffer(length) as view:
            await fill(blob, starts[index], view, etag, location)
            pieces[index] = (await crc64(view), length)

    await for_each(range(len(starts)), one, min(concurrency, len(starts)) or 1)
    return checksum.encode(combine_all(pieces))
