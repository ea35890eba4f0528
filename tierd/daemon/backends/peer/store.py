"""The peer directory of this node: the parts other nodes of the fleet sent here.

A file another node sends lands at ``<path>/<node>/<checkpoint id>/<relpath>`` of the peer
tier's directory (``node``: the sender). It is written by the POSIX backend's write path
(directory descriptors, never a symlink followed): under a temporary name, hashed while
written, fsynced, renamed; a body that does not hash to the CRC64NVME the sender took at
first sight is refused (IntegrityError) and leaves nothing. The size the sender declares is
checked against the room the directory has before a byte is read (NoSpace: the peer tier's
``free_space.evict_below`` stays free).

What receiving holds in memory comes from the daemon's one buffer budget (32 MiB), which
the daemon's API gives its store: a peer daemon receiving while it hops holds one set of
buffers, not its 32 MiB beside a receiving budget's 16 (its peak RSS, bench_peer: see
docs/data-path.md). A store given no budget has one of its own (``RECEIVE_BUDGET``; the
process-wide default one, 64 MiB, would let the files arriving at once take up to 64 MiB).
Four files at once move at full pace; more wait for a buffer, in order. A sender holds at
most a 1 MiB buffer per file it sends (none over ``rawput``'s sendfile), and each of its
requests has a timeout, so two nodes sending to each other cannot hold each other's
budgets for good.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from collections.abc import AsyncIterator, Callable

from tierd.config import PeerTier, PosixTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import ObjectInfo, RangeReader, WriteRequest, check_relpath
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.peer.stream import SocketReader, StreamReader
from tierd.daemon.backends.posix import PosixBackend
from tierd.errors import NoSpace, NotFound

__all__ = [
    "CHECKSUM_HEADER",
    "CHECKSUM_SHAPE",
    "CHUNKS_IN_FLIGHT",
    "NODE_NAME",
    "RECEIVE_BUDGET",
    "RECEIVE_CHUNK",
    "PeerStore",
]

#: The header a sender puts the file's CRC64NVME in (base64, as S3 spells it).
CHECKSUM_HEADER = "x-tierd-crc64nvme"
#: A CRC64NVME in base64: 8 bytes, 12 characters, one ``=`` of padding.
CHECKSUM_SHAPE = re.compile(r"^[A-Za-z0-9+/]{10}[AEIMQUYcgkosw048]=$")
#: Bytes of a received file hashed and written at once, and how many such chunks are in flight.
RECEIVE_CHUNK = 2 * MIB
CHUNKS_IN_FLIGHT = 2
#: The buffers every file being received takes its chunks from (unless given another budget).
RECEIVE_BUDGET = 4 * CHUNKS_IN_FLIGHT * RECEIVE_CHUNK
#: A node's name as a directory of the peer tier: one path component, no control character.
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


class PeerStore:
    """The files held for other nodes, each under its sender's name and its checkpoint's id."""

    def __init__(self, tier: PeerTier, *, budget: ByteBudget | None = None) -> None:
        """Over ``tier.path``; nothing is opened until a request comes.

        ``budget``: where received chunks' buffers come from (a ``RECEIVE_BUDGET`` of its own
        by default).
        """
        self.tier = tier
        # Two chunks of a file at a time: one hashed and written while the next arrives (the
        # stream hands them out in order: StreamReader).
        posix = PosixTier(
            name=tier.name, kind="posix", path=tier.path, concurrency=CHUNKS_IN_FLIGHT, verify=tier.verify
        )
        budget = budget or ByteBudget(RECEIVE_BUDGET)
        self.backend = PosixBackend(posix, budget=budget, chunk_size=RECEIVE_CHUNK)
        #: Files moving at once (the tier's ``concurrency``): the routes answer 503 past it.
        self.slots = asyncio.Semaphore(tier.concurrency)
        self._exists = False

    @staticmethod
    def relpath(node: str, checkpoint_id: int, relpath: str = "") -> str:
        """Where a node's file (or, with no ``relpath``, its part) of a checkpoint is held.

        Raises ValueError naming what is malformed.
        """
        if not NODE_NAME.match(node):
            raise ValueError(f"node {node!r} is not a node name (letters, digits, '.', '_', '-')")
        if checkpoint_id < 1:
            raise ValueError(f"checkpoint {checkpoint_id} is not a checkpoint id")
        top = f"{node}/{checkpoint_id}"
        return f"{top}/{check_relpath(relpath)}" if relpath else top

    async def _made(self) -> None:
        """Create the peer directory (mode 0700: the parts of every node) when it is not there yet."""
        if not self._exists:
            await blocking(os.makedirs, self.tier.path, 0o700, True)
            self._exists = True

    async def room_for(self, size: int) -> None:
        """Raise NoSpace unless ``size`` more bytes leave the low mark free.

        TransientBackendError when the directory is missing.
        """
        await self._made()
        space = await self.backend.space()
        low = self.tier.free_space.marks(space.total)[0] if self.tier.free_space else 0
        if space.free - size < low:
            raise NoSpace(
                f"peer tier {self.tier.name}: {size} bytes would leave {space.free - size} of "
                f"{space.total} free, below free_space.evict_below ({low} bytes)"
            )

    async def receive(self, where: str, size: int, checksum: str, chunks: AsyncIterator[bytes]) -> ObjectInfo:
        """Write ``size`` streamed bytes at ``where`` (a ``relpath``), verified against ``checksum``.

        Raises NoSpace before reading when the room is not there, IntegrityError (nothing
        left behind) when the bytes are short or do not hash to ``checksum``, else
        Transient/PermanentBackendError.
        """
        await self.room_for(size)
        reader = StreamReader(chunks, size, self.backend.location(where))
        return await self.backend.write(WriteRequest(where, reader, checksum))

    async def receive_from(
        self, where: str, size: int, checksum: str, take: Callable[[], socket.socket]
    ) -> ObjectInfo:
        """``receive``, the body read off the sender's connection into the write's own buffers.

        ``take`` is called once the room is there: it asks the sender for the body and gives
        the connection's socket (non-blocking). Raises as ``receive``; a sender that leaves
        or stalls mid-body is IntegrityError (nothing kept).
        """
        await self.room_for(size)
        reader = SocketReader(take(), size, self.backend.location(where))
        return await self.backend.write(WriteRequest(where, reader, checksum))

    async def stat(self, where: str) -> ObjectInfo:
        """The held file's size. Raises NotFound."""
        return await self.backend.stat(where)

    async def open(self, where: str) -> RangeReader:
        """A reader over the held file. Raises NotFound."""
        return await self.backend.open_reader(where)

    async def delete(self, where: str) -> int:
        """Remove a held file, or every file of a part (``where`` without a relpath); how many.

        Emptied directories go too; a missing file is fine, and so is a peer directory never
        made (nothing was held yet: a sender dropping what a copy it gave up on took).
        """
        await self._made()
        try:
            await self.backend.stat(where)
            files = [where]
        except NotFound:  # not a file: a part's directory, or nothing
            files = [info.relpath async for info in self.backend.list(where + "/")]
        for relpath in files:
            await self.backend.delete(relpath)
        return len(files)

    async def sweep(self) -> int:
        """Remove the temporary files no write holds (a sender or this daemon cut off mid-file); how many.

        Raises Transient/PermanentBackendError when the directory cannot be read.
        """
        await self._made()
        return await self.backend.remove_own_temps()

    async def close(self) -> None:
        """Release the directory's descriptors."""
        await self.backend.close()
