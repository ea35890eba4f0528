"""Reading blobs: ranged GETs pinned to the ETag seen at open, and parallel read-back hashing.

Every GET goes on the data path's own connections (``AzureRest.get``, on ``httpwire``), its
body copied straight into the caller's buffer. Every ranged read after the opening one
carries ``If-Match`` with the ETag the opening GET saw, so all of a reader's bytes come from
one version of the blob (a 412 means it changed: the next try opens it again). A small object read whole
(``read_whole``) is one GET with no range: its Content-Length must be the size recorded. A
read-back hashes ``READBACK_RANGE`` ranges in parallel and combines their CRCs; each range's
bytes are charged to the buffer budget while held.

A blob in the Archive access tier answers every read with 409 ``BlobArchived``, which
``azure.errors`` turns into ``ObjectArchived``: a restore from it is refused with that
reason at once, never left waiting for the hours a rehydration takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierd.daemon import checksum
from tierd.daemon.backends.azure.rest import AzureRest
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.hashing import combine_all, crc64
from tierd.daemon.backends.headfirst import HeadFirstReader
from tierd.errors import IntegrityError, TransientBackendError

__all__ = [
    "OPEN_RANGE",
    "READBACK_RANGE",
    "AzureReader",
    "Blob",
    "fill",
    "hash_blob",
    "open_blob",
    "read_whole_blob",
]

#: What ``open_reader``'s GET asks for: a small blob whole.
OPEN_RANGE = 256 * 1024
READBACK_RANGE = 8 * MIB


@dataclass(frozen=True)
class Blob:
    """One blob on the data path: the session it is read over, its name, and where it is."""

    rest: AzureRest
    name: str
    location: str


async def fill(blob: Blob, offset: int, view: memoryview, etag: str | None) -> None:
    """Fill ``view`` with the blob's bytes from ``offset`` (one GET, ``If-Match`` ``etag``).

    Raises TransientBackendError when the body ends early or the blob changed (412).
    """
    headers = {"x-ms-range": f"bytes={offset}-{offset + len(view) - 1}"}
    if etag:
        headers["If-Match"] = etag
    async with blob.rest.get(blob.name, "read", blob.location, headers=headers) as answer:
        got = await answer.fill(view)
    if got != len(view):
        raise TransientBackendError(f"read {blob.location}: got {got} of {len(view)} bytes at {offset}")


async def open_blob(blob: Blob) -> AzureReader:
    """A reader of the blob's current version, opened by a GET of its first ``OPEN_RANGE`` bytes.

    Raises NotFound when missing, ObjectArchived for a blob in the Archive tier, and
    PermanentBackendError ``... 416 ...`` for an empty blob (no range of it exists).
    """
    head = bytearray(OPEN_RANGE)
    headers = {"x-ms-range": f"bytes=0-{OPEN_RANGE - 1}"}
    async with blob.rest.get(blob.name, "open", blob.location, headers=headers) as answer:
        got = await answer.fill(memoryview(head))
        size = _total_size(answer.headers.get("content-range", ""), got)
        etag = answer.headers.get("etag")
    del head[got:]
    return AzureReader(blob, size, etag, bytes(head))


async def read_whole_blob(blob: Blob, view: memoryview) -> None:
    """The whole blob into ``view`` (one GET, no range).

    Raises IntegrityError when it is not ``len(view)`` bytes long, NotFound when missing.
    """
    async with blob.rest.get(blob.name, "read", blob.location) as answer:
        declared = answer.headers.get("content-length")
        if declared is not None and declared != str(len(view)):
            raise IntegrityError(f"{blob.location}: holds {declared} bytes, expected {len(view)}")
        got = await answer.fill(view)
    if got != len(view):
        raise IntegrityError(f"{blob.location}: holds {got} bytes, expected {len(view)}")


def _total_size(content_range: str, got: int) -> int:
    """The blob's size from ``bytes a-b/total`` (a whole answer without one: what came)."""
    if "/" in content_range and not content_range.endswith("/*"):
        return int(content_range.rsplit("/", 1)[1])
    return got


class AzureReader(HeadFirstReader):
    """A RangeReader over one version of a blob; ``head`` holds its first bytes (a small one whole)."""

    def __init__(self, blob: Blob, size: int, etag: str | None, head: bytes) -> None:
        super().__init__(size, head)
        self._blob, self._etag = blob, etag

    async def fetch(self, offset: int, view: memoryview) -> None:
        """Fill ``view`` from ``offset``, pinned to the ETag seen at open.

        Raises NotFound if the blob vanished, TransientBackendError if it changed since open.
        """
        await fill(self._blob, offset, view, self._etag)


async def hash_blob(blob: Blob, size: int, etag: str | None, *, concurrency: int, budget: ByteBudget) -> str:
    """CRC64NVME of the whole blob (``size`` bytes), ranges read back in parallel."""
    starts = list(range(0, size, READBACK_RANGE))
    pieces = [(0, min(READBACK_RANGE, size - start)) for start in starts]

    async def one(index: int) -> None:
        length = pieces[index][1]
        async with budget.aligned(length) as view:
            await fill(blob, starts[index], view, etag)
            pieces[index] = (await crc64(view), length)

    await for_each(range(len(starts)), one, min(concurrency, len(starts)) or 1)
    return checksum.encode(combine_all(pieces))
