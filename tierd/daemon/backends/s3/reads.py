"""Reading S3 objects: ranged GETs straight into a caller's buffer, and parallel read-back hashing.

Bodies are read with aiohttp's ``readchunk``, which hands over each piece as the parser
produced it: one copy into the caller's buffer (aiobotocore's ``readinto`` joins the
pieces first and copies twice), or no copy at all when the piece is only hashed. Hashing
runs inline: a piece is at most a few hundred KiB and CRC64NVME does ~10 GB/s, so a
thread hop would cost more than the hash (see ``transfer.INLINE_HASH_LIMIT``).

A read-back splits the object into ``READBACK_RANGE`` ranges fetched in parallel, each
pinned to the ETag the caller saw with ``If-Match``, so every range comes from the same
object; the range CRCs are combined, never recomputed. A single GET stream from
``rclone serve s3`` runs near 350 MiB/s on this machine; four ranged ones over 1 GiB/s.
With a ``direct`` GET (custom endpoints), a range is read in ``DIRECT_PIECE`` pieces straight
from the socket into a budget's aligned buffer and hashed there, off the loop: the read-back
of a 1 GiB upload then costs about half the CPU of aiohttp's pieces (docs/data-path.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from awscrt import checksums

from tierd.daemon import checksum
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.hashing import combine_all, crc64
from tierd.daemon.backends.headfirst import HeadFirstReader
from tierd.daemon.backends.s3.errors import s3_errors
from tierd.errors import TransientBackendError

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

__all__ = [
    "READBACK_RANGE",
    "BodyReader",
    "DirectGet",
    "RangeGet",
    "S3Reader",
    "content_range_total",
    "hash_ranges",
]

READBACK_RANGE = 32 * MIB
DIRECT_PIECE = 8 * MIB  # what one direct GET of a read-back brings into a budget buffer
READ_PIECE = 256 * 1024  # aiohttp buffers up to twice this per stream before pausing the socket


def _crc(piece: bytes, previous: int) -> int:
    return int(checksums.crc64nvme(piece, previous))


class BodyReader:
    """A response body copied into caller buffers, one copy per byte.

    What a piece holds beyond the buffer waits (as a view, not a copy) for the next call.
    """

    def __init__(self, body: Any) -> None:
        self._body, self._content = body, body.content
        self._content.set_read_chunk_size(READ_PIECE)
        self._left: memoryview | None = None

    async def into(self, view: memoryview) -> int:
        """Fill ``view`` from where the last call stopped; fewer bytes only at the body's end."""
        got, want = 0, len(view)
        if self._left is not None:
            got = min(len(self._left), want)
            view[:got] = self._left[:got]
            self._left = self._left[got:] if got < len(self._left) else None
        while got < want:
            piece, _ = await self._content.readchunk()
            if not piece:
                break
            n = min(len(piece), want - got)
            if n < len(piece):
                whole = memoryview(piece)
                view[got : got + n], self._left = whole[:n], whole[n:]
            else:
                view[got : got + n] = piece
            got += n
        return got

    def close(self) -> None:
        """Release the connection (dropped if the body was not read to its end)."""
        self._left = None
        self._body.close()


async def _body_crc(body: Any, length: int) -> tuple[int, int]:
    """(CRC64NVME, bytes) of a response body, hashed piece by piece as it arrives."""
    content = body.content
    content.set_read_chunk_size(READ_PIECE)
    crc = got = 0
    while got < length:
        piece, _ = await content.readchunk()
        if not piece:
            break
        crc = _crc(piece, crc)
        got += len(piece)
    return crc, got


def content_range_total(response: Any) -> int:
    """The object's full size from a ranged GET's ``Content-Range``, else its ``Content-Length``."""
    spec = response.get("ContentRange")
    if spec and "/" in spec and not spec.endswith("/*"):
        return int(spec.rsplit("/", 1)[1])
    return int(response["ContentLength"])


#: ``direct(key, etag, offset, view)``: one ranged GET into ``view`` off botocore's path
#: (``PipelinedGets.get_range``); whether it filled it.
DirectGet = Callable[[str, str | None, int, memoryview], Awaitable[bool]]


class RangeGet:
    """Ranged GETs of one object version (``If-Match`` its ETag).

    With ``direct``, a range is first read straight from the socket into its buffer; what
    that leaves goes through botocore, which also reports the error. ``budget`` (with
    ``direct``) lends the buffers a read-back hashes its pieces in.
    """

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        key: str,
        etag: str | None,
        location: str,
        direct: DirectGet | None = None,
        budget: ByteBudget | None = None,
    ) -> None:
        self.client, self.bucket, self.key, self.etag = client, bucket, key, etag
        self.location, self.direct, self.budget = location, direct, budget

    async def _get(self, first: int, last: int) -> Any:
        return await self.client.get_object(
            Bucket=self.bucket, Key=self.key, Range=f"bytes={first}-{last}", IfMatch=self.etag or "*"
        )

    async def read_into(self, offset: int, view: memoryview) -> int:
        """Fill ``view`` from ``offset`` with one GET; TransientBackendError if the body ends early."""
        with s3_errors("read", self.location):
            if self.direct is not None and await self.direct(self.key, self.etag, offset, view):
                return len(view)
            response = await self._get(offset, offset + len(view) - 1)
            body = BodyReader(response["Body"])
            try:
                got = await body.into(view)
            finally:
                body.close()
        if got != len(view):
            raise TransientBackendError(f"read {self.location}: got {got} of {len(view)} bytes at {offset}")
        return got

    async def crc(self, first: int, length: int) -> int:
        """CRC64NVME of ``length`` bytes from ``first``: by direct pieces where it can, else streamed."""
        if self.direct is None or self.budget is None:
            return await self._streamed_crc(first, length)
        crc = pos = 0
        while pos < length:
            n = min(DIRECT_PIECE, length - pos)
            async with self.budget.aligned(n) as view:
                with s3_errors("hash", self.location):
                    filled = await self.direct(self.key, self.etag, first + pos, view)
                piece = await crc64(view) if filled else await self._streamed_crc(first + pos, n)
            crc = checksum.combine(crc, piece, n)
            pos += n
        return crc

    async def _streamed_crc(self, first: int, length: int) -> int:
        """CRC64NVME of ``length`` bytes from ``first`` by a botocore GET, hashed as they arrive."""
        with s3_errors("hash", self.location):
            response = await self._get(first, first + length - 1)
            body = response["Body"]
            try:
                crc, got = await _body_crc(body, length)
            finally:
                body.close()
        if got != length:
            raise TransientBackendError(f"hash {self.location}: got {got} of {length} bytes at {first}")
        return crc


async def hash_ranges(ranges: RangeGet, size: int, concurrency: int, range_size: int = READBACK_RANGE) -> str:
    """CRC64NVME of the whole object (``size`` bytes), ranges read back in parallel."""
    starts = list(range(0, size, range_size))
    pieces: list[tuple[int, int]] = [(0, min(range_size, size - s)) for s in starts]

    async def one(index: int) -> None:
        length = pieces[index][1]
        pieces[index] = (await ranges.crc(starts[index], length), length)

    await for_each(range(len(starts)), one, min(concurrency, len(starts)) or 1)
    return checksum.encode(combine_all(pieces))


class S3Reader(HeadFirstReader):
    """A RangeReader doing ranged GETs pinned to the ETag seen at open.

    ``head`` holds the object's first bytes, which the GET that opened it brought (all of a
    small object); reads within them need no request.
    """

    def __init__(self, ranges: RangeGet, size: int, head: bytes | bytearray | None = None) -> None:
        super().__init__(size, head if head is not None else b"")
        self._ranges = ranges

    async def fetch(self, offset: int, view: memoryview) -> None:
        """Fill ``view`` from ``offset``.

        Raises NotFound if the object vanished, TransientBackendError if it changed
        since open (412: the next try opens it again) or the network failed.
        """
        await self._ranges.read_into(offset, view)
