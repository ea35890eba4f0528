"""A tier seen from one checkpoint's directory, so a copy names each file as the target will.

The shared copy (``transfer.copier.FileCopier``, ``transfer.copyset``) names a file by
the same relative path on both sides. A restore into ``<target>`` writes
``<target>/<name>`` for the file a tier holds at ``<checkpoint path>/<name>``: reading through
``Rebased(tier, "<checkpoint path>")`` lets the copy name it ``<name>`` on both sides.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import replace

from tierd.daemon.backends.base import (
    Backend,
    ObjectInfo,
    RangeReader,
    Space,
    WriteRequest,
)
from tierd.errors import TierdError

__all__ = ["Rebased"]


class Rebased(Backend):
    """``inner`` with every relpath taken under ``prefix`` (reads; writes go to the same place).

    Errors are the inner backend's. ``close`` does nothing: the daemon owns the inner backend.
    """

    def __init__(self, inner: Backend, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix.strip("/")
        self.name = inner.name
        self.features = inner.features
        self.budget = inner.budget

    def _full(self, relpath: str) -> str:
        return f"{self.prefix}/{relpath}" if self.prefix else relpath

    def location(self, relpath: str) -> str:
        """Where the inner tier keeps it."""
        return self.inner.location(self._full(relpath))

    async def stat(self, relpath: str) -> ObjectInfo:
        """The inner ``stat``, named as asked. Raises NotFound."""
        info = await self.inner.stat(self._full(relpath))
        return replace(info, relpath=relpath)

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """The inner listing under the prefix, named relative to it."""
        cut = len(self.prefix) + 1 if self.prefix else 0
        async for info in self.inner.list(self._full(prefix) if prefix else self.prefix):
            yield ObjectInfo(info.relpath[cut:], info.size, info.checksum, info.mtime, info.verified_by)

    async def open_reader(self, relpath: str) -> RangeReader:
        """The inner reader (a kernel-side copy still sees a POSIX file). Raises NotFound."""
        return await self.inner.open_reader(self._full(relpath))

    async def read_whole(
        self, relpaths: Sequence[str], views: Sequence[memoryview]
    ) -> Sequence[TierdError | None]:
        """The inner ``read_whole``."""
        return await self.inner.read_whole([self._full(r) for r in relpaths], views)

    async def prefetch(self, relpaths: Sequence[str]) -> None:
        """The inner hint."""
        await self.inner.prefetch([self._full(r) for r in relpaths])

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """The inner ``write``."""
        return await self.inner.write(replace(request, relpath=self._full(request.relpath)))

    async def delete(self, relpath: str) -> None:
        """The inner ``delete``."""
        await self.inner.delete(self._full(relpath))

    async def hash(self, relpath: str) -> str:
        """The inner ``hash``. Raises NotFound."""
        return await self.inner.hash(self._full(relpath))

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        """The inner ``verify``. Raises NotFound, IntegrityError."""
        info = await self.inner.verify(self._full(relpath), expected_checksum)
        return replace(info, relpath=relpath)

    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        """Nothing: the daemon sweeps the inner tier itself."""
        return 0

    async def remove_leftovers(self, relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        """The inner ``remove_leftovers`` of these files. Raises Transient/PermanentBackendError."""
        return await self.inner.remove_leftovers([self._full(r) for r in relpaths], keep=keep)

    async def close(self) -> None:
        """Nothing: the daemon closes the inner tier."""

    async def space(self) -> Space | None:
        """The inner tier's space."""
        return await self.inner.space()

    async def local_disk(self) -> bool:
        """Whether the inner tier is on this node's disks."""
        return await self.inner.local_disk()
