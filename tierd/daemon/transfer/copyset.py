"""Copy a checkpoint's files through one WriteBatch, the completion marker last and alone.

Data files are copied ``concurrency`` at a time; the batch is committed whenever it is
full (while the copy goes on into the next batch, one commit at a time) and once all the
data is copied. Only then is the newest-written file (usually the
format's completion marker) copied, alone, and committed: a destination never shows the
marker before the data is durable. A file counts as done only once it is durable under
its final name: when its write returns if it stood alone, after the commit that made it
durable if the batch staged it. Whatever is still staged when the copy fails or is
cancelled is discarded (written again next time). A hop between tiers copies this way,
and so will a restore.

Files up to ``GROUP_FILE_LIMIT`` go in groups of consecutive files
(``FileCopier.copy_group``: read whole together, written or staged together, one lane and
one tier slot per group), because a small file's cost is trips to the I/O pool and
event-loop work, not bytes; a file its group could not copy is copied again on its own,
with the retries. Ahead of the copy lanes, the source is told which other small files come
next (``Backend.prefetch``), so that from a cold page cache their reads queue up together
rather than one lane's wait at a time.

Between two file systems of this node's own disks (``Backend.local_disk``) a group costs
CPU, not waiting: its reads are announced ahead (by the source itself where it says so,
``Features.announced_whole_reads``: a POSIX tier opens a group's files and announces them all
before reading the first), and the rest is system calls with Python in between. There one
group runs at a time (``LOCAL_GROUP_LANES``): each system call lets go of the GIL, and while
another thread wants it every one became a futex wake and a context switch. For 5,000 files
on this project's 2-core VMs, three lanes made 11,000-24,000 context switches a hop and spent
a third of the daemon's CPU switching (``perf``: ``finish_task_switch`` and
``try_to_wake_up`` under ``pthread_cond_signal``); one lane made 2,000-3,400, took 0.58 CPU-s
against 0.96 (median of 5, load 2-4) and no longer (0.79 s against 0.85 s). Earlier, 16
lanes had taken 1.3x the time and 1.4x the CPU of 3.
Bigger files keep every lane, and so does any hop that involves a network or parallel file
system or an object store, where lanes hide round trips.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from typing import NamedTuple

from tierd.daemon.backends.base import Backend, ObjectInfo, WriteBatch
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.markers import MARKER_NAMES
from tierd.daemon.transfer.copier import FileCopier
from tierd.daemon.transfer.spec import FileSpec
from tierd.errors import TierdError
from tierd.logs import get_logger

__all__ = [
    "GROUP_BYTES",
    "GROUP_FILES",
    "GROUP_FILE_LIMIT",
    "LOCAL_GROUP_BYTES",
    "LOCAL_GROUP_FILES",
    "LOCAL_GROUP_LANES",
    "FileDone",
    "FileProgress",
    "Skip",
    "copy_checkpoint_files",
    "group_bytes",
    "in_groups",
    "marker_last",
]

log = get_logger(__name__)

#: Files up to this size are copied in groups; a group holds at most ``GROUP_FILES`` files
#: and ``GROUP_BYTES`` bytes (in memory at once, within the buffer budget), fewer bytes when
#: its lanes' groups would take more than half the budget (``group_bytes``).
GROUP_FILE_LIMIT = 1024 * 1024
GROUP_FILES = 64
GROUP_BYTES = 2 * 1024 * 1024

#: Groups in flight at once between two local file systems: one (a second thread only takes
#: the GIL from the first at each system call; see the module docstring).
LOCAL_GROUP_LANES = 1
#: A group between two local file systems, on its one lane: fewer trips to the I/O thread
#: and fewer groups' bookkeeping (5,000 files: 0.54 CPU-s against 0.58 with groups of 64).
LOCAL_GROUP_FILES = 256
LOCAL_GROUP_BYTES = 8 * 1024 * 1024

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


def marker_last(files: Sequence[FileSpec], markers: Collection[str] = MARKER_NAMES) -> list[FileSpec]:
    """``files`` in copy order: the last one is the completion marker.

    Files named as a marker (``markers``: file names, the formats' own by default) after the
    others, then oldest first. The mtime alone is not enough: files written within one tick of
    the file system's clock share it, and ``.metadata`` sorts before ``__0_0.distcp``.
    """
    return sorted(files, key=lambda f: (posixpath.basename(f.relpath) in markers, f.mtime_ns, f.relpath))


async def copy_checkpoint_files(
    copier: FileCopier,
    batch: WriteBatch,
    files: Sequence[FileSpec],
    *,
    concurrency: int,
    skip: Skip | None = None,
    progress: FileProgress | None = None,
    done: FileDone | None = None,
    markers: Collection[str] = MARKER_NAMES,
) -> None:
    """Copy ``files`` with ``copier``, which writes through ``batch``, the marker last (``marker_last``).

    ``done`` is called once per file, when it is durable (see the module docstring).
    Raises what the copier or ``batch.commit()`` raised, after discarding what was staged.
    """
    if copier.batch is not batch:
        raise ValueError("the copier must write through the batch being committed")
    copyset = _CopySet(copier, batch, skip, progress or _no_counter, done or _ignore)
    await copyset.run(marker_last(files, markers), concurrency)


class _Stream(NamedTuple):
    """Units that share ``lanes``; ``hinted``: the source hears of their files ahead."""

    units: Sequence[FileSpec | Sequence[FileSpec]]
    lanes: int
    hinted: bool


class _CopySet:
    """One copy of a checkpoint's files: the hooks, the batch, and what waits for its commit."""

    __slots__ = ("awaiting", "batch", "committing", "copier", "counter", "hints", "report", "skip")

    def __init__(
        self,
        copier: FileCopier,
        batch: WriteBatch,
        skip: Skip | None,
        counter: FileProgress,
        report: FileDone,
    ) -> None:
        self.copier = copier
        self.batch = batch
        self.skip = skip
        self.counter = counter
        self.report = report
        #: Files written into the batch's staging and not yet committed by it.
        self.awaiting: dict[str, tuple[FileSpec, ObjectInfo]] = {}
        self.hints: list[asyncio.Task[None]] = []
        #: The commit of a full batch, running while the lanes go on copying (one at a time).
        self.committing: asyncio.Task[None] | None = None

    async def run(self, ordered: Sequence[FileSpec], concurrency: int) -> None:
        """The data on its streams and committed, then the completion marker (the last) alone, committed."""
        streams = await self._streams(ordered[:-1], concurrency)
        try:
            await for_each(streams, self._run_stream, len(streams))
            await self._settle_commit()
            await self._commit()
            await for_each(ordered[-1:], self._unit, 1)  # the completion marker, once the data is durable
            await self._settle_commit()
            await self._commit()
        finally:
            for hint in self.hints:
                hint.cancel()
            if (task := self.committing) is not None:  # a failed copy's commit still under way
                await asyncio.wait([task])
                if not task.cancelled():
                    task.exception()  # retrieved: the copy's own error is the one raised
            await asyncio.shield(self.batch.discard())  # staged and never committed: written again next time

    async def _streams(self, data: Sequence[FileSpec], concurrency: int) -> list[_Stream]:
        """Files copied alone: every lane, hinted. Groups: every lane, hinted when on fewer.

        Between local file systems groups run on ``LOCAL_GROUP_LANES``, bigger unless the hop
        has a bandwidth cap (its bytes and progress advance a group at a time). Groups
        are not hinted when the source announces their reads itself (``announced_whole_reads``).
        """
        grouped = self.copier.groups_small_files and any(s.size <= GROUP_FILE_LIMIT for s in data)
        local = grouped and await _both_local(self.copier)
        group_lanes = min(concurrency, LOCAL_GROUP_LANES) if local else concurrency
        big = local and self.copier.bucket is None  # a capped hop's progress moves group by group
        files, most = (LOCAL_GROUP_FILES, LOCAL_GROUP_BYTES) if big else (GROUP_FILES, GROUP_BYTES)
        most = group_bytes(group_lanes, self.copier.dst.budget.limit, most)
        units = in_groups(data, most, files) if grouped else data
        alone = [work for work in units if isinstance(work, FileSpec)]
        groups = [work for work in units if not isinstance(work, FileSpec)]
        hint_groups = group_lanes < concurrency and not self.copier.src.features.announced_whole_reads
        return [_Stream(alone, concurrency, True), _Stream(groups, group_lanes, hint_groups)]

    async def _run_stream(self, stream: _Stream) -> None:
        units = _read_ahead(self.copier.src, stream.units, self.hints) if stream.hinted else stream.units
        await for_each(units, self._unit, stream.lanes)

    async def _unit(self, work: FileSpec | Sequence[FileSpec]) -> None:
        await (self._one(work) if isinstance(work, FileSpec) else self._group(work))
        while self.batch.full:  # committed behind the lanes; a second full batch waits for the first
            if self.committing is None:
                self.committing = asyncio.create_task(self._commit())
                return
            await self._settle_commit()

    async def _settle_commit(self) -> None:
        """Wait for the commit under way, if any; raises its error.

        A full batch is committed while the lanes go on copying into the next one: its
        ``syncfs`` waits for the disk (and for everything else written to that file system),
        and one local lane waiting on it stopped copying meanwhile.
        """
        task = self.committing
        if task is None:
            return
        try:
            await asyncio.shield(task)
        finally:
            if self.committing is task and task.done():
                self.committing = None

    async def _one(self, spec: FileSpec, failed: TierdError | None = None) -> None:
        if failed is None and self.skip is not None and await self._skipped(self.skip, spec):
            return
        self._settle(spec, await self.copier.copy(spec, self.counter(spec), failed=failed))

    async def _group(self, specs: Sequence[FileSpec]) -> None:
        if (skip := self.skip) is not None:
            specs = [spec for spec in specs if not await self._skipped(skip, spec)]
        failures: list[tuple[FileSpec, TierdError]] = []
        for spec, result in zip(specs, await self.copier.copy_group(specs), strict=True):
            if isinstance(result, TierdError):
                failures.append((spec, result))
            else:
                self.counter(spec)(spec.size)
                self._settle(spec, result)
        for spec, error in failures:  # tried again on its own
            await self._one(spec, error)

    async def _skipped(self, skip: Skip, spec: FileSpec) -> bool:
        """Whether the destination holds ``spec`` already (then reported done, with no write)."""
        if await skip(spec):
            self.report(spec, None)
            return True
        return False

    def _settle(self, spec: FileSpec, info: ObjectInfo) -> None:
        """Report ``spec`` done now, or once the commit of the batch that staged it returns."""
        if self.batch.holds(spec.relpath):
            self.awaiting[spec.relpath] = (spec, info)
        else:
            self.report(spec, info)

    async def _commit(self) -> None:
        for relpath in await self.batch.commit():
            # Absent: its copy has not returned yet, and reports it (no longer held) when it does.
            if (held := self.awaiting.pop(relpath, None)) is not None:
                self.report(*held)


def group_bytes(lanes: int, budget: int, most: int | None = None) -> int:
    """A group's most bytes: ``most`` (``GROUP_BYTES``), less where ``lanes`` of them pass half ``budget``.

    A restore of 5,000 small files on an object store's 16 lanes held all 32 MiB of it. Never
    under ``GROUP_FILE_LIMIT``, the biggest file a group takes.
    """
    return max(GROUP_FILE_LIMIT, min(GROUP_BYTES if most is None else most, budget // (2 * lanes)))


def in_groups(
    files: Sequence[FileSpec], most_bytes: int | None = None, most_files: int | None = None
) -> list[FileSpec | tuple[FileSpec, ...]]:
    """``files`` in order, runs of small ones gathered into groups of ``most_files`` and ``most_bytes``.

    Those are ``GROUP_FILES`` and ``GROUP_BYTES`` when not given (see ``group_bytes``).
    """
    most_bytes = GROUP_BYTES if most_bytes is None else most_bytes
    most_files = GROUP_FILES if most_files is None else most_files
    units: list[FileSpec | tuple[FileSpec, ...]] = []
    current: list[FileSpec] = []
    size = 0
    for spec in files:
        if spec.size > GROUP_FILE_LIMIT:
            units.append(spec)
            continue
        if len(current) == most_files or size + spec.size > most_bytes:
            units.append(tuple(current))
            current, size = [], 0
        current.append(spec)
        size += spec.size
    if current:
        units.append(tuple(current))
    return units


async def _both_local(copier: FileCopier) -> bool:
    """Whether the copy runs between two file systems of this node's own disks."""
    return await copier.src.local_disk() and await copier.dst.local_disk()


def _read_ahead(
    src: Backend, units: Sequence[FileSpec | Sequence[FileSpec]], hints: list[asyncio.Task[None]]
) -> Iterator[FileSpec | Sequence[FileSpec]]:
    """``units`` in order, the source told of their small files two windows ahead of the lanes.

    It hears whenever a window or less of hinted files is left ahead of the lanes. A group
    reads its files in one trip, and with all its lanes hinting its files cost more than it
    saved (an extra open per file); on a few lanes the hints are what queues reads up.
    """
    files = [spec for work in units for spec in _files_of(work)]
    told = handed = 0  # files hinted to the source, and handed to the lanes
    for work in units:
        if told < len(files) and handed + READ_AHEAD_FILES >= told:  # a window or less left
            window = files[told : handed + 2 * READ_AHEAD_FILES]
            told += len(window)
            if small := [f.relpath for f in window if f.size <= READ_AHEAD_MAX_SIZE]:
                hints.append(asyncio.create_task(src.prefetch(small)))
        handed += len(_files_of(work))
        yield work


def _files_of(work: FileSpec | Sequence[FileSpec]) -> Sequence[FileSpec]:
    return (work,) if isinstance(work, FileSpec) else work


def _ignore(spec: FileSpec, info: ObjectInfo | None) -> None:
    pass


def _no_counter(spec: FileSpec) -> Callable[[int | None], None]:
    return _count_nothing


def _count_nothing(nbytes: int | None) -> None:
    pass
