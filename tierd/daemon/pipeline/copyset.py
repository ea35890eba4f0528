"""Copy a checkpoint's files through one WriteBatch, the completion marker last and alone.

Data files are copied ``concurrency`` at a time; the batch is committed whenever it is
full and once all the data is copied. Only then is the newest-written file (usually the
format's completion marker) copied, alone, and committed: a destination never shows the
marker before the data is durable. A file counts as done only once it is durable under
its final name: when its write returns if it stood alone, after the commit that made it
durable if the batch staged it. Whatever is still staged when the copy fails or is
cancelled is discarded (written again next time). A hop between tiers copies this way,
and so will a restore.

Ahead of the copy lanes, the source is told which small files come next
(``Backend.prefetch``), so that from a cold page cache their reads queue up together rather
than one lane's wait at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence

from tierd.daemon.backends.base import Backend, ObjectInfo, WriteBatch
from tierd.daemon.backends.transfer import for_each
from tierd.daemon.pipeline.records import FileSpec
from tierd.daemon.pipeline.transfer import FileCopier

__all__ = ["FileDone", "FileProgress", "Skip", "copy_checkpoint_files", "marker_last"]

#: Files hinted to the source ahead of the copy lanes, a window at a time.
READ_AHEAD_FILES = 128
#: Bigger files are read in chunks, with the source's own read-ahead: not hinted.
READ_AHEAD_MAX_SIZE = 8 * 1024 * 1024

#: ``skip(spec)``: whether the destination already holds the file (a resumed copy).
Skip = Callable[[FileSpec], Awaitable[bool]]
#: ``progress(spec)``: the copier's byte counter for that file.
FileProgress = Callable[[FileSpec], Callable[[int | None], None]]
#: ``done(spec, info)``: the file is durable under its final name; ``info`` is its verified
#: write, None when it was skipped.
FileDone = Callable[[FileSpec, ObjectInfo | None], None]


def marker_last(files: Sequence[FileSpec]) -> list[FileSpec]:
    """``files`` oldest first: the last one is the completion marker."""
    return sorted(files, key=lambda f: (f.mtime_ns, f.relpath))


async def copy_checkpoint_files(
    copier: FileCopier,
    batch: WriteBatch,
    files: Sequence[FileSpec],
    *,
    concurrency: int,
    skip: Skip | None = None,
    progress: FileProgress | None = None,
    done: FileDone | None = None,
) -> None:
    """Copy ``files`` with ``copier``, which writes through ``batch``, the marker last.

    ``done`` is called once per file, when it is durable (see the module docstring).
    Raises what the copier or ``batch.commit()`` raised, after discarding what was staged.
    """
    if copier.batch is not batch:
        raise ValueError("the copier must write through the batch being committed")
    report = done or _ignore
    counter = progress or _no_counter
    awaiting: dict[str, tuple[FileSpec, ObjectInfo]] = {}

    async def commit() -> None:
        for relpath in await batch.commit():
            # Absent: its copy has not returned yet, and reports it (no longer held) when it does.
            if (held := awaiting.pop(relpath, None)) is not None:
                report(*held)

    async def one(spec: FileSpec) -> None:
        if skip is not None and await skip(spec):
            report(spec, None)
            return
        info = await copier.copy(spec, counter(spec))
        if not batch.holds(spec.relpath):
            report(spec, info)
            return
        awaiting[spec.relpath] = (spec, info)
        if batch.full:
            await commit()

    ordered = marker_last(files)
    hints: list[asyncio.Task[None]] = []
    try:
        await for_each(_read_ahead(copier.src, ordered[:-1], hints), one, concurrency)
        await commit()
        await for_each(ordered[-1:], one, 1)  # the completion marker, once the data is durable
        await commit()
    finally:
        for hint in hints:
            hint.cancel()
        await asyncio.shield(batch.discard())  # staged and never committed: written again next time


def _read_ahead(
    src: Backend, files: Sequence[FileSpec], hints: list[asyncio.Task[None]]
) -> Iterator[FileSpec]:
    """``files`` in order; at each window's start the source hears of the window after it."""
    for index, spec in enumerate(files):
        if index % READ_AHEAD_FILES == 0:
            start = index + READ_AHEAD_FILES if index else 0
            small = [
                f.relpath
                for f in files[start : index + 2 * READ_AHEAD_FILES]
                if f.size <= READ_AHEAD_MAX_SIZE
            ]
            if small:
                hints.append(asyncio.create_task(src.prefetch(small)))
        yield spec


def _ignore(spec: FileSpec, info: ObjectInfo | None) -> None:
    pass


def _no_counter(spec: FileSpec) -> Callable[[int | None], None]:
    return _count_nothing


def _count_nothing(nbytes: int | None) -> None:
    pass
