"""The shared FileCopier, with a second (and third...) source for a file whose bytes are bad.

A restore reads each file from the nearest tier with a verified replica that holds it (a
node-local tier 0 holds only this node's part of a step written by several nodes: the other
files are read from the next tier, with no fallback, since they were never there). When that copy of a
file does not hash to the checksum taken at first sight (IntegrityError) or is missing
(NotFound), the file is copied from the next tier holding a verified replica, and the
``fallback`` hook hears of it (the restore marks the bad replica failed, for the pipeline to
repair, and reports it). A tier whose copy sits in an archive storage class (S3's GLACIER or
DEEP_ARCHIVE, not restored: ObjectArchived) is passed over for the next tier without being
marked bad; when no tier is left the restore fails with that tier and its class named
(tierd does not request an archive restore itself: the reason says how to). A peer that
cannot be reached, or refuses this node's token (PeerUnavailable), is passed over the same
way, unmarked. Other errors are retried as the pipeline does, then raised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tierd.config import S3_ARCHIVE_CLASSES, TierConfig
from tierd.daemon.backends.base import ObjectInfo
from tierd.daemon.backends.peer.fetch import PeerUnavailable
from tierd.daemon.transfer.copier import FileCopier
from tierd.daemon.transfer.spec import FileSpec
from tierd.errors import IntegrityError, NotFound, ObjectArchived, TierdError

__all__ = ["BAD_REPLICA", "FallbackCopier", "FallbackHook", "archive_classes"]

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
    #: Source tier name -> its archive storage class (``archive_classes``).
    archived: Mapping[str, str] = field(default_factory=dict)
    #: Source name -> how many files were copied from it (shared by a restore's passes).
    read_from: Counter[str] = field(default_factory=Counter)

    def _holds(self, copier: FileCopier, spec: FileSpec) -> bool:
        names = self.partial.get(copier.src.name)
        return names is None or spec.relpath in names

    async def copy_group(self, specs: Sequence[FileSpec]) -> list[ObjectInfo | TierdError]:
        """The pipeline's group copy of the files the first source holds; the others NotFound.

        Each file that failed is copied again on its own (``copy``), from the next source.
        """
        held = [spec for spec in specs if self._holds(self, spec)]
        copied = await super().copy_group(held) if held else []
        self.read_from[self.src.name] += sum(not isinstance(r, TierdError) for r in copied)
        results = iter(copied)
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
                bad = None
            try:
                if copier is self:
                    info = await super().copy(spec, progress, failed=failed)
                else:
                    info = await copier.copy(spec, progress)
                self.read_from[copier.src.name] += 1
                return info
            except ObjectArchived as exc:  # not bad, only asleep: the next tier, nothing marked
                error = self._archived(spec, copier.src.name, exc)
            except PeerUnavailable as exc:  # the holder is away, its copy may be fine: next, unmarked
                error = exc
            except BAD_REPLICA as exc:
                error, bad = exc, copier.src.name
        if bad is not None:
            await self.fallback(spec, bad, None, error)
        raise error

    def _archived(self, spec: FileSpec, tier: str, exc: ObjectArchived) -> ObjectArchived:
        """Why ``tier`` cannot give ``spec`` now: its class, and what would make it readable."""
        kept = self.archived.get(tier, "an archive storage class")
        return ObjectArchived(
            f"{spec.relpath}: tier {tier} keeps it in storage class {kept}, which the store must"
            " restore before it can be read, and no other tier holding a verified copy could give it;"
            " tierd does not request that restore: restore the checkpoint's objects"
            f" (aws s3api restore-object), then ask again ({exc})"
        )


def archive_classes(tiers: Sequence[TierConfig]) -> dict[str, str]:
    """Tier name -> storage class, for the tiers whose objects must be restored before a read."""
    classes = {t.name: getattr(t, "storage_class", None) for t in tiers}
    return {name: kept for name, kept in classes.items() if kept in S3_ARCHIVE_CLASSES}
