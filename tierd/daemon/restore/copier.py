"""The shared FileCopier, with a second (and third...) source for a file whose bytes are bad.

A restore reads each file from the nearest tier with a verified replica that holds it (a
node-local tier 0 holds only this node's part of a step written by several nodes: the other
files are read from the next tier, with no fallback, since they were never there). When that copy of a
file does not hash to the checksum taken at first sight (IntegrityError) or is missing
(NotFound), the file is copied from the next tier holding a verified replica, and the
``fallback`` hook hears of it (the restore marks the bad replica failed, for the pipeline to
repair, and reports it). Other errors are retried as the pipeline does, then raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tierd.daemon.backends.base import ObjectInfo
from tierd.daemon.transfer.copier import FileCopier
from tierd.daemon.transfer.spec import FileSpec
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
    #: Source tier name -> the only names it holds (a node-local tier 0 holding one part).
    partial: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def _holds(self, copier: FileCopier, spec: FileSpec) -> bool:
        names = self.partial.get(copier.src.name)
        return names is None or spec.relpath in names

    async def copy_group(self, specs: Sequence[FileSpec]) -> list[ObjectInfo | TierdError]:
        """The pipeline's group copy of the files the first source holds; the others NotFound.

        Each file that failed is copied again on its own (``copy``), from the next source.
        """
        held = [spec for spec in specs if self._holds(self, spec)]
        results = iter(await super().copy_group(held) if held else [])
        return [
            next(results) if self._holds(self, spec) else NotFound(f"{spec.relpath}: not on {self.src.name}")
            for spec in specs
        ]

    async def copy(
        self, spec: FileSpec, progress: Callable[[int | None], None], *, failed: TierdError | None = None
    ) -> ObjectInfo:
        """Copy ``spec`` from the first source holding it whose bytes match; raises the last error.

        Raises what the copy raised when it is not a bad replica, or when every source's is;
        NotFound when no source holds the file.
        """
        chain = [c for c in (self, *self.fallbacks) if self._holds(c, spec)]
        error: TierdError = NotFound(f"{spec.relpath}: on no tier this node can read")
        bad: str | None = None
        for copier in chain:
            if bad is not None:
                await self.fallback(spec, bad, copier.src.name, error)
            try:
                if copier is self:
                    return await super().copy(spec, progress, failed=failed)
                return await copier.copy(spec, progress)
            except BAD_REPLICA as exc:
                error, bad = exc, copier.src.name
        if bad is not None:
            await self.fallback(spec, bad, None, error)
        raise error
