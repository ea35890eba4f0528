"""The pipeline's file copier, with a second (and third...) source for a file whose bytes are bad.

A restore reads each file from the nearest tier with a verified replica. When that copy of a
file does not hash to the checksum taken at first sight (IntegrityError) or is missing
(NotFound), the file is copied from the next tier holding a verified replica, and the
``fallback`` hook hears of it (the restore marks the bad replica failed, for the pipeline to
repair, and reports it). Other errors are retried as the pipeline does, then raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from tierd.daemon.backends.base import ObjectInfo
from tierd.daemon.pipeline.records import FileSpec
from tierd.daemon.pipeline.transfer import FileCopier
from tierd.errors import IntegrityError, NotFound, TierdError

__all__ = ["BAD_REPLICA", "FallbackCopier", "FallbackHook"]

#: Errors that say this tier's copy of the file is bad, not that the copy failed.
BAD_REPLICA = (IntegrityError, NotFound)
#: ``fallback(spec, bad_tier, next_tier, error)``, awaited before the next tier is tried (and
#: with ``next_tier`` None when no tier is left).
FallbackHook = Callable[[FileSpec, str, str | None, TierdError], Awaitable[None]]


async def _no_hook(spec: FileSpec, bad: str, good: str | None, error: TierdError) -> None:
    return None


@dataclass
class FallbackCopier(FileCopier):
    """A FileCopier from the nearest source, then from each of ``fallbacks`` in turn (same target)."""

    fallbacks: Sequence[FileCopier] = ()
    fallback: FallbackHook = field(default=_no_hook)

    async def copy(
        self, spec: FileSpec, progress: Callable[[int | None], None], *, failed: TierdError | None = None
    ) -> ObjectInfo:
        """Copy ``spec`` from the first source whose bytes match; raises the last error.

        Raises what the copy raised when it is not a bad replica, or when every source's is.
        """
        try:
            return await super().copy(spec, progress, failed=failed)
        except BAD_REPLICA as exc:
            error: TierdError = exc
        bad = self.src.name
        for copier in self.fallbacks:
            await self.fallback(spec, bad, copier.src.name, error)
            try:
                return await copier.copy(spec, progress)
            except BAD_REPLICA as exc:
                error, bad = exc, copier.src.name
        await self.fallback(spec, bad, None, error)
        raise error
