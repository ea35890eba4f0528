"""The storage backend interface every tier implements, after rclone's ``fs.Fs``.

A checkpoint file at ``<tier0>/<rel>`` lives at ``<root>/<rel>`` on a POSIX tier and at
``s3://<bucket>/<prefix><rel>`` on an S3 tier. Every path in this interface is a clean
POSIX relative path (``str``) under the tier root; anything else raises ``ValueError``
(a caller bug, not a storage failure).

Errors: each method raises only tierd errors -- ``NotFound``, ``IntegrityError``,
``TransientBackendError`` (retry may help), ``PermanentBackendError`` -- plus
``ValueError`` for a malformed path. Third-party errors are translated at one boundary
per backend (``s3.errors`` for botocore/aiohttp, ``posix.errors`` for ``OSError``).

Verification (``write``'s return value): ``ObjectInfo.checksum`` is set by ``write`` and
``verify`` only once the stored bytes were checked against the expected checksum, and
``ObjectInfo.verified_by`` says how: ``"store"`` when the store reported the CRC64NVME
itself, ``"readback"`` when every byte was read back and hashed, ``"stream"`` when a POSIX
tier with ``verify: native`` hashed every byte on its way to ``pwrite`` and ``fsync``
succeeded (the kernel took exactly the bytes recorded at first sight). ``stat`` reports the
store's own checksum when it has one, ``list`` never does; for both ``verified_by`` is None.

Owner and mode: ``WriteRequest`` (what ``write`` and ``WriteBatch.write`` take), ``SmallFile``
and ``copy_from`` carry the ``Ownership`` recorded at first sight (None: not recorded). A
POSIX tier gives the file that owner, group and mode before its rename (``posix.owner``);
an object store keeps them as object metadata (``backends.ownermeta``: rclone's ``mode``, ``uid``,
``gid``), and its ``stat`` reports them back in ``ObjectInfo.owner``.

Small files in groups: ``Backend.read_whole`` reads a group of small objects whole and
``WriteBatch.write_whole`` writes a group of them, each answering per object (its bytes, or
its error) so one bad file does not fail the others. A POSIX tier does either in one trip
to the I/O pool; by default they go one object after another. A checkpoint of thousands of
small files costs trips to the thread pool and event-loop work per file, not bytes.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from tierd.errors import IntegrityError, PermanentBackendError, TierdError

if TYPE_CHECKING:
    from tierd.daemon.backends.budget import ByteBudget
    from tierd.daemon.backends.uploads import PartState, UploadState

__all__ = [
    "Space",
    "Backend",
    "BytesReader",
    "Features",
    "ObjectInfo",
    "Ownership",
    "Progress",
    "RangeReader",
    "ResumeStore",
    "SmallFile",
    "Verification",
    "WriteBatch",
    "WriteRequest",
    "check_prefix",
    "check_relpath",
    "copies_server_side",
    "copy_object",
    "read_full",
    "recorded_owner",
]

Verification = Literal["store", "readback", "stream"]
Progress = Callable[[int], None]


@dataclass(frozen=True)
class Features:
    """Optional abilities of a backend, declared rather than discovered."""

    native_checksum: bool  # the store validates/reports a full-object CRC64NVME
    server_side_copy: bool  # copy_from() works for a source that can_copy_from() accepts
    multipart: bool  # parallel parts, resumable through a ResumeStore
    #: read_whole announces every object's read before the first one (no prefetch needed)
    announced_whole_reads: bool = False
    #: set_legal_hold works: the store itself refuses to delete a held object
    legal_hold: bool = False


@dataclass(frozen=True)
class Space:
    """A tier's file system: its size and the bytes free to an unprivileged writer."""

    total: int
    free: int


@dataclass(frozen=True)
class Ownership:
    """A file's or directory's owner, group and permission bits, as recorded at first sight.

    ``mode`` holds ``stat.S_IMODE`` of the source (``0o640``), never the file type bits.
    """

    uid: int
    gid: int
    mode: int


def recorded_owner(uid: int | None, gid: int | None, mode: int | None) -> Ownership | None:
    """The Ownership of catalog fields; None when any is not recorded."""
    if uid is None or gid is None or mode is None:
        return None
    return Ownership(uid, gid, mode)


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object (a file of a checkpoint)."""

    relpath: str
    size: int
    checksum: str | None  # CRC64NVME, base64 as S3 spells it
    mtime: float | None
    verified_by: Verification | None = None
    #: The owner and mode the store keeps for it (an S3 ``stat``); None where not known.
    owner: Ownership | None = None


class RangeReader(Protocol):
    """A random-access byte source, so parts can be read in parallel."""

    size: int

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` from ``offset``; fewer bytes only at end of data."""
        ...

    async def close(self) -> None:
        """Release the source."""
        ...


class ResumeStore(Protocol):
    """Where multipart state survives a restart (the pipeline keeps it in the catalog)."""

    async def load(self, relpath: str) -> UploadState | None:
        """The state recorded for ``relpath``, with its finished parts, or None."""
        ...

    async def begin(self, relpath: str, state: UploadState) -> None:
        """Record a new upload (replacing any earlier one for ``relpath``)."""
        ...

    async def part_done(self, relpath: str, part: PartState) -> None:
        """Record one finished part."""
        ...

    async def clear(self, relpath: str) -> None:
        """Forget ``relpath``'s upload (completed or aborted)."""
        ...


@dataclass(frozen=True)
class SmallFile:
    """A small file's bytes, read whole, with the checksum recorded at first sight."""

    relpath: str
    data: bytes | bytearray | memoryview
    checksum: str  # CRC64NVME expected, base64
    owner: Ownership | None = None  # recorded at first sight; None: not recorded


@dataclass(frozen=True)
class WriteRequest:
    """One file for ``Backend.write``: its name, its bytes and the checksum they must hash to.

    ``resume``: where a multipart upload's state survives a restart (None: not kept);
    ``progress``: called with each count of bytes written; ``owner``: the owner, group and
    mode recorded at first sight, kept with the file (None: the store's default).
    """

    relpath: str
    reader: RangeReader
    expected_checksum: str  # CRC64NVME, base64
    _: KW_ONLY
    resume: ResumeStore | None = None
    progress: Progress | None = None
    owner: Ownership | None = None


class BytesReader:
    """A RangeReader over bytes already in memory (a small file read whole, tests)."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = data  # what a writer may send as it is, without copying it into a buffer
        self._data = memoryview(data).cast("B")
        self.size = len(self._data)

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Copy from memory; short only at the end."""
        chunk = self._data[offset : offset + len(buf)]
        buf[: len(chunk)] = chunk
        return len(chunk)

    async def close(self) -> None:
        """Nothing to release."""


class Backend(ABC):
    """One storage tier. Subclasses document the errors each method raises."""

    name: str
    features: Features
    budget: ByteBudget  # bounds the bytes its transfers hold in memory (shared by every tier)

    @abstractmethod
    def location(self, relpath: str) -> str:
        """The human-readable final location: a path or ``s3://bucket/key``."""

    @abstractmethod
    async def stat(self, relpath: str) -> ObjectInfo:
        """Size, mtime and the store's checksum if any. Raises NotFound when missing."""

    @abstractmethod
    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Every object under the directory ``prefix`` (recursive, order unspecified)."""

    @abstractmethod
    async def open_reader(self, relpath: str) -> RangeReader:
        """A RangeReader over the object. Raises NotFound when missing."""

    @abstractmethod
    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Store ``request.reader.size`` bytes from its reader under ``request.relpath``, verified.

        The request's ``owner`` is kept with the object (None: the store's default). Nothing
        partial is ever visible under the final name. Raises IntegrityError (leaving nothing
        under the final name) when the bytes read or stored do not hash to
        ``request.expected_checksum``.
        """

    @abstractmethod
    async def delete(self, relpath: str) -> None:
        """Remove the object; a missing one is fine."""

    @abstractmethod
    async def hash(self, relpath: str) -> str:
        """Read back every byte and return its CRC64NVME. Raises NotFound when missing."""

    @abstractmethod
    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        """Check the stored object against ``expected_checksum`` (native or read-back).

        Returns the ObjectInfo with ``checksum`` and ``verified_by`` set. Raises NotFound
        when missing, IntegrityError on a mismatch (the object is left as it is).
        """

    @abstractmethod
    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        """Remove leftovers of interrupted writes older than that; returns how many.

        ``keep`` names multipart UploadIds that must survive whatever their age (the
        catalog means to resume them); backends without multipart uploads ignore it.
        """

    @abstractmethod
    async def remove_leftovers(self, relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        """Remove what interrupted writes of exactly these files left, whatever its age; returns how many.

        A hop calls it before it copies (its job's lease makes it the only writer of its
        files). Only these files' leftovers: another daemon may be writing other files of
        the same checkpoint into the same directory or prefix at the same time. ``keep``
        names multipart UploadIds the catalog means to resume; a write in progress in this
        process is never touched. Raises Transient/PermanentBackendError.
        """

    @abstractmethod
    async def close(self) -> None:
        """Release connections and file handles."""

    def batch(self) -> WriteBatch:
        """A WriteBatch for the writes of one hop (by default each write stands alone)."""
        return WriteBatch(self)

    async def read_whole(
        self, relpaths: Sequence[str], views: Sequence[memoryview]
    ) -> Sequence[TierdError | None]:
        """Read each small object whole into its view, which is exactly the size it should be.

        Returns, in order, None for an object read or the error that stopped it:
        IntegrityError when its size is not its view's, NotFound when missing, else
        Transient/PermanentBackendError. By default one after another, through ``open_reader``.
        """
        return [await self._read_one(relpath, view) for relpath, view in zip(relpaths, views, strict=True)]

    async def _read_one(self, relpath: str, view: memoryview) -> TierdError | None:
        """``_read_into``, its error returned instead of raised."""
        try:
            await self._read_into(relpath, view)
        except TierdError as exc:
            return exc
        return None

    async def _read_into(self, relpath: str, view: memoryview) -> None:
        """One object of ``read_whole`` into its view, through ``open_reader`` (a store may go faster)."""
        where = self.location(relpath)
        reader = await self.open_reader(relpath)
        try:
            if reader.size != len(view):
                raise IntegrityError(f"{where}: holds {reader.size} bytes, expected {len(view)}")
            await read_full(reader, 0, view, where=where)
        finally:
            await asyncio.shield(reader.close())

    async def prefetch(self, relpaths: Sequence[str]) -> None:
        """Hint that these objects will be read soon (by default nothing); never raises."""
        return None

    def expect_directories(self, owners: Mapping[str, Ownership]) -> None:
        """The owner and mode to give each directory (by path) a write makes; by default ignored.

        A store without directories has nothing to apply them to.
        """
        return None

    async def space(self) -> Space | None:
        """Size and free bytes of the tier's file system; None for stores that do not fill up.

        Raises TransientBackendError when the tier cannot be reached.
        """
        return None

    async def remove_checkpoint(self, path: str, markers: Sequence[str], rest: Sequence[str]) -> None:
        """Remove the files of the checkpoint at ``path`` so it never looks complete while half removed.

        ``markers`` (completion markers) go before ``rest``; missing files are fine. By
        default one ``delete`` after another. Raises Transient/PermanentBackendError.
        """
        for relpath in [*markers, *rest]:
            await self.delete(relpath)

    async def local_disk(self) -> bool:
        """Whether the tier is a file system of this node's own disks (by default not); never raises.

        Small files cost such a tier CPU rather than round trips (see ``transfer.copyset``).
        """
        return False

    def can_copy_from(self, src: Backend) -> bool:
        """Whether ``copy_from(src, ...)`` can copy without streaming the bytes."""
        return False

    async def check_legal_hold(self) -> None:
        """At start: ConfigError unless the store keeps legal holds (by default PermanentBackendError)."""
        raise PermanentBackendError(f"tier {self.name}: this kind of store keeps no legal holds")

    async def set_legal_hold(self, relpaths: Sequence[str], on: bool) -> None:
        """Set or clear each object's legal hold (NotFound if missing); PermanentBackendError by default."""
        raise PermanentBackendError(f"tier {self.name}: this kind of store keeps no legal holds")

    async def copy_from(
        self,
        src: Backend,
        src_relpath: str,
        dst_relpath: str,
        expected_checksum: str,
        *,
        owner: Ownership | None = None,
    ) -> ObjectInfo:
        """Server-side copy, verified and given ``owner`` as by ``write``; only if ``can_copy_from(src)``."""
        raise NotImplementedError(f"{self.name} has no server-side copy")


class WriteBatch:
    """Writes into one tier that may be made durable and visible together, by ``commit``.

    ``write`` is ``Backend.write`` with one difference: a backend may *stage* the file
    (verified, but neither durable nor under its final name) until ``commit``, which
    returns the relpaths it committed. ``holds`` tells whether a file awaits commit (staged,
    or taken by a commit that has not returned yet: not durable), ``full`` that the batch
    wants committing now, ``discard`` drops what is staged (after a failure or a
    cancellation; the files must be written again). This default stages nothing: every
    write is complete when it returns.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def full(self) -> bool:
        """Whether ``commit`` should run before more files are staged."""
        return False

    def holds(self, relpath: str) -> bool:
        """Whether ``relpath`` is staged, awaiting a ``commit`` (or one still under way)."""
        return False

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Write (or stage) the file, verified, with its owner; raises like ``Backend.write``."""
        return await self.backend.write(request)

    async def write_whole(self, files: Sequence[SmallFile]) -> Sequence[ObjectInfo | TierdError]:
        """``write`` each small file (or stage it), in order; a file that failed is its error.

        The caller holds the files' bytes within the budget: writing them must not wait
        for more of it. By default one ``write`` after another.
        """
        results: list[ObjectInfo | TierdError] = []
        for file in files:
            try:
                info = await self.write(
                    WriteRequest(file.relpath, BytesReader(file.data), file.checksum, owner=file.owner)
                )
            except TierdError as exc:
                results.append(exc)
            else:
                results.append(info)
        return results

    async def commit(self) -> list[str]:
        """Make every staged file durable and visible; returns their relpaths."""
        return []

    async def discard(self) -> None:
        """Drop every staged file (best effort, never raises)."""


def copies_server_side(src: Backend, dst: Backend) -> bool:
    """Whether a copy from ``src`` into ``dst`` goes server-side (``dst.copy_from``)."""
    return dst.features.server_side_copy and dst.can_copy_from(src)


async def copy_object(
    src: Backend,
    src_relpath: str,
    dst: Backend,
    dst_relpath: str,
    expected_checksum: str,
    *,
    resume: ResumeStore | None = None,
    progress: Progress | None = None,
    owner: Ownership | None = None,
) -> ObjectInfo:
    """Copy one object between tiers (given ``owner``): server-side when possible, else streamed.

    Raises NotFound when the source is missing, IntegrityError when the bytes do not
    match ``expected_checksum`` (nothing is left under the destination name), and the
    backends' Transient/PermanentBackendError.
    """
    if copies_server_side(src, dst):
        info = await dst.copy_from(src, src_relpath, dst_relpath, expected_checksum, owner=owner)
        if progress is not None:
            progress(info.size)
        return info
    reader = await src.open_reader(src_relpath)
    try:
        return await dst.write(
            WriteRequest(
                dst_relpath, reader, expected_checksum, resume=resume, progress=progress, owner=owner
            )
        )
    finally:
        await asyncio.shield(reader.close())


async def read_full(reader: RangeReader, offset: int, view: memoryview, *, where: str) -> None:
    """Fill ``view`` from ``offset``; IntegrityError if the source ends early."""
    filled = 0
    while filled < len(view):
        n = await reader.read_into(offset + filled, view[filled:])
        if n <= 0:
            raise IntegrityError(
                f"{where}: source ended at byte {offset + filled}, expected {len(view)} "
                f"bytes from offset {offset} (did the file shrink?)"
            )
        filled += n


def check_relpath(relpath: str) -> str:
    """``relpath`` if it is a clean relative POSIX path, else ValueError."""
    if not isinstance(relpath, str) or not relpath:
        raise ValueError(f"not a relative path: {relpath!r}")
    if relpath.startswith("/") or "\x00" in relpath:
        raise ValueError(f"not a relative path: {relpath!r}")
    parts = relpath.split("/")
    if "" in parts or "." in parts or ".." in parts:
        raise ValueError(f"path has empty, '.' or '..' components: {relpath!r}")
    return relpath


def check_prefix(prefix: str) -> str:
    """A directory prefix as ``"a/b/"`` (or ``""`` for the whole tier)."""
    if prefix in ("", "/"):
        return ""
    return check_relpath(prefix.rstrip("/")) + "/"


def mismatch(location: str, expected: str, actual: str, how: str) -> IntegrityError:
    """The IntegrityError for bytes that do not hash to the expected checksum."""
    return IntegrityError(
        f"{location}: {how} CRC64NVME {actual} != expected {expected}", expected=expected, actual=actual
    )
