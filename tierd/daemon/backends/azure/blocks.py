"""Big files as block blobs: blocks staged in parallel, each with its CRC64, then committed.

Each block goes up with ``x-ms-content-crc64``, its CRC64NVME as 8 little-endian bytes in
base64 (Azure's CRC64 is the same function as CRC64NVME), so the service refuses a block
whose bytes it did not receive intact (``Crc64Mismatch``). The block CRCs are the hashing
tierd does while reading anyway; combined, they give the whole file's CRC64NVME, which must
equal the checksum recorded at first sight before the block list is committed, and which is
stored as the blob's ``crc64nvme`` metadata (``verify`` compares it).

Block IDs are deterministic: ``tierd1-<expected CRC>-<block size>-<index>-<block CRC>``
(fixed width, as Azure wants all IDs of a blob to be). A write first asks the service for
the blob's uncommitted blocks (Get Block List) and stages only the indexes it does not
hold with the right length, so a daemon killed mid-upload resends only what was not
staged, whether or not the catalog recorded it. The block's CRC in its ID is the one the
service validated it against, so the resumed blocks' CRCs are known without reading them.
A blob is visible only once Put Block List commits it: nothing partial is ever seen under
its name, and an existing blob is replaced in one step.

The catalog's resume record (``ResumeStore``) gets the upload's tag (``tierd1-<expected
CRC>-<block size>``) as its UploadId and each staged block as a part, so the progress of a
hop and the janitor's ``keep`` work as for S3.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass

from tierd.daemon import checksum
from tierd.daemon.backends.azure.calls import blob_properties, block_lists, commit_blocks, delete_blob, exists
from tierd.daemon.backends.azure.puts import put_block, write_headers
from tierd.daemon.backends.azure.rest import AzureRest
from tierd.daemon.backends.base import RangeReader, WriteRequest, mismatch, read_full
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.hashing import combine_all, crc64
from tierd.daemon.backends.uploads import PartState, UploadState
from tierd.errors import IntegrityError, NotFound, PermanentBackendError, TransientBackendError

__all__ = [
    "MAX_BLOCKS",
    "BlockUpload",
    "WriteOptions",
    "azure_crc64",
    "block_size_for",
    "parse_block_id",
    "upload_tag",
]

MAX_BLOCKS = 50_000
TARGET_BLOCKS = 45_000
MAX_BLOCK = 4000 * MIB
_PREFIX = "tierd1"


def azure_crc64(value: int) -> str:
    """A CRC64NVME as ``x-ms-content-crc64`` wants it: 8 little-endian bytes, base64."""
    return base64.b64encode(value.to_bytes(8, "little")).decode("ascii")


def block_size_for(size: int, configured: int) -> int:
    """The block size for ``size`` bytes: the configured one, grown to stay under 45,000 blocks."""
    needed = -(-size // TARGET_BLOCKS)
    needed = -(-needed // MIB) * MIB
    return min(MAX_BLOCK, max(configured, needed))


def upload_tag(expected: str, block_size: int) -> str:
    """What every block ID of one upload starts with (and its UploadId in the catalog)."""
    return f"{_PREFIX}-{checksum.decode(expected):016x}-{block_size:010x}"


def block_id(tag: str, index: int, crc: int) -> str:
    """The ID of block ``index`` (from 0) whose bytes hash to ``crc``."""
    return f"{tag}-{index:06d}-{crc:016x}"


def parse_block_id(block: str) -> tuple[str, int, int] | None:
    """(tag, index, CRC) of a block ID tierd made; None for any other."""
    parts = block.split("-")
    if len(parts) != 5 or parts[0] != _PREFIX:
        return None
    try:
        return "-".join(parts[:3]), int(parts[3], 10), int(parts[4], 16)
    except ValueError:
        return None


@dataclass(frozen=True)
class WriteOptions:
    """What goes with every write of a tier: access tier, encryption scope, parallelism."""

    standard_blob_tier: str | None
    encryption_scope: str | None
    concurrency: int
    budget: ByteBudget

    def headers(self) -> dict[str, str]:
        """The headers of a Put Blob or a Put Block List: access tier and encryption scope."""
        return write_headers(self.standard_blob_tier, self.encryption_scope)


class BlockUpload:
    """One block blob written from a reader, resumable from the service's uncommitted blocks."""

    def __init__(
        self, name: str, rest: AzureRest, options: WriteOptions, location: str, block_size: int
    ) -> None:
        self.name, self.rest, self.options, self.location = name, rest, options, location
        self.configured_block_size = block_size
        self.sent_bytes = 0  # bytes staged by this write (not those resumed)

    async def write(self, request: WriteRequest, metadata: Mapping[str, str]) -> None:
        """Stage the missing blocks, check the combined CRC, commit with ``metadata``.

        Raises IntegrityError (the staged blocks discarded) when the combined CRC differs
        from the expected one or the service refused a block's CRC64.
        """
        size, expected = request.reader.size, request.expected_checksum
        block_size = block_size_for(size, self.configured_block_size)
        tag = upload_tag(expected, block_size)
        count = max(1, -(-size // block_size))
        held = await self._held(tag, size, block_size)
        if request.resume is not None:
            state = UploadState(tag, self.name, block_size, size)
            await request.resume.begin(request.relpath, state)
        try:
            crcs = await self._stage_missing(request, tag, block_size, count, held)
            combined = checksum.encode(
                combine_all([(crcs[i], _length(i, size, block_size)) for i in range(count)])
            )
            if combined != expected:
                raise mismatch(self.location, expected, combined, "source")
            await self._commit([block_id(tag, i, crcs[i]) for i in range(count)], metadata)
            await self._check_size(size)
        except IntegrityError:
            await asyncio.shield(self.discard())
            if request.resume is not None:
                await request.resume.clear(request.relpath)
            raise
        if request.resume is not None:
            await request.resume.clear(request.relpath)

    async def _commit(self, ids: list[str], metadata: Mapping[str, str]) -> None:
        """Put Block List; a block the service no longer holds drops the rest, to start over.

        Raises TransientBackendError then (a sweep or the seven days removed staged blocks
        this write counted on: the next try stages every block again).
        """
        try:
            await commit_blocks(self.rest, self.name, self.location, ids, metadata, self.options.headers())
        except PermanentBackendError as exc:
            if "InvalidBlockList" not in str(exc):
                raise
            await asyncio.shield(self.discard())
            raise TransientBackendError(
                f"{exc} (staged blocks vanished: the next try sends them all)"
            ) from exc

    async def _check_size(self, size: int) -> None:
        """The committed blob's size must be the file's (Get Blob Properties).

        Azure refuses a block list naming a block it does not hold (InvalidBlockList);
        Azurite 3.37 commits what it has. A blob of the wrong size is deleted and the write
        fails with TransientBackendError (the next try sends every block again).
        """
        committed = (await blob_properties(self.rest, self.name, self.location)).size
        if committed != size:
            await delete_blob(self.rest, self.name, self.location)
            raise TransientBackendError(
                f"{self.location}: the service committed {committed} bytes of {size} (a staged block "
                "vanished before the commit): deleted, the next try sends every block"
            )

    async def _held(self, tag: str, size: int, block_size: int) -> dict[int, int]:
        """{index: CRC} of this upload's blocks the service holds uncommitted, of the right length."""
        try:
            _, uncommitted = await block_lists(self.rest, self.name, self.location, "uncommitted")
        except NotFound:
            return {}
        held: dict[int, int] = {}
        for block in uncommitted:
            parsed = parse_block_id(str(block.id))
            if parsed is None or parsed[0] != tag:
                continue
            _, index, crc = parsed
            if index * block_size < size and block.size == _length(index, size, block_size):
                held[index] = crc
        return held

    async def _stage_missing(
        self, request: WriteRequest, tag: str, block_size: int, count: int, held: dict[int, int]
    ) -> dict[int, int]:
        crcs = dict(held)
        size = request.reader.size
        if request.progress is not None and held:
            request.progress(sum(_length(i, size, block_size) for i in held))

        async def send(index: int) -> None:
            length = _length(index, size, block_size)
            crc = await self._stage(request.reader, tag, index, index * block_size, length)
            crcs[index] = crc
            if request.resume is not None:
                part = PartState(index + 1, length, block_id(tag, index, crc), checksum.encode(crc))
                await request.resume.part_done(request.relpath, part)
            if request.progress is not None:
                request.progress(length)

        todo = [i for i in range(count) if i not in held]
        await for_each(todo, send, self.options.concurrency)
        return crcs

    async def _stage(self, reader: RangeReader, tag: str, index: int, offset: int, length: int) -> int:
        """Read, hash and stage one block with its CRC64; returns the CRC."""
        where = f"{self.location} block {index}"
        async with self.options.budget.aligned(length) as view:
            await read_full(reader, offset, view, where=where)
            crc = await crc64(view)
            await put_block(
                self.rest,
                self.name,
                where,
                block_id(tag, index, crc),
                view,
                azure_crc64(crc),
                self.options.encryption_scope,
            )
        self.sent_bytes += length
        return crc

    async def discard(self) -> None:
        """Drop the staged blocks of a blob that has no committed version (best effort)."""
        try:
            committed, _ = await block_lists(self.rest, self.name, self.location, "committed")
            if committed or await exists(self.rest, self.name, self.location):
                return  # a committed version is there: its uncommitted blocks expire in 7 days
            await delete_blob(self.rest, self.name, self.location, "discard blocks of")
        except (NotFound, PermanentBackendError):
            return
        except Exception:  # best effort: the sweep gets them later
            return


def _length(index: int, size: int, block_size: int) -> int:
    return max(0, min(block_size, size - index * block_size))
