"""The memory budget every transfer buffer comes from.

Every buffer a write holds comes from a ByteBudget, so the daemon's memory stays
bounded whatever the object size and however many writes run at once. Chunk buffers
(``ByteBudget.aligned``) are page-aligned, as ``O_DIRECT`` needs, and reused: a fresh
buffer costs a page fault per 4 KiB on its first fill (on this project's test VMs, writing
4 GiB through fresh 8 MiB buffers took 7-8 s of system time against 2 s through one
reused buffer).

Big plain buffers (``ByteBudget.buffer`` from ``REUSED_FROM`` bytes: a whole file read for one
S3 or Azure PUT, a POSIX write's whole-file buffer; an S3 upload's parts take aligned ones)
are such reused mappings too, of whole huge pages: as fresh bytearrays they were the C
heap's, each zeroed as it was made (``REUSED_FROM``).

Aligned buffers are private mappings; those of ``HUGE_FROM`` bytes or more the kernel is asked
to back with transparent huge pages (``MADV_HUGEPAGE``; honoured where THP is ``always`` or
``madvise``): an ``O_DIRECT`` write sends the buffer's physical pages to the device as they
lie, one segment per page, and a request holds at most the queue's ``max_segments`` of
them. From 4 KiB pages that capped each request at ~1 MiB (254 segments on this project's
virtio disk; NVMe often takes 127): a 4 GiB hop sent 6,600-11,300 write requests of
380-650 KiB, the disk busy 26-31 s, and took 2x ``cp`` + ``sync``. From 2 MiB pages a
request can be the queue's 4 MiB: 1,200-3,500 requests of 1.3-3.4 MiB, busy 12-16 s
(docs/data-path.md).

A process has several budgets (the daemon's, a peer tier's receiving one), and the idle
buffers of each are the process's memory all the same: an aligned buffer a budget needs is
first taken from its own idle ones, then from another budget's of the same size, and a
fresh mapping first unmaps other budgets' idle buffers until every budget's buffers, in use
and idle, fit in the asking budget's limit. A busy budget keeps its own idle buffers (a
fresh one costs a page fault per page), but no longer beside another's left idle: a peer
daemon kept its receiving budget's last buffers (up to 16 MiB) while each later hop filled
the daemon's 32 MiB.
"""

from __future__ import annotations

import asyncio
import mmap
import sys
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "HUGE_FROM",
    "HUGE_PAGE",
    "MIB",
    "REUSED_FROM",
    "ByteBudget",
    "default_budget",
    "map_aligned",
]

MIB = 1024 * 1024
DEFAULT_BUDGET_BYTES = 64 * MIB
#: A transparent huge page on x86-64 and arm64 (4 KiB base pages).
HUGE_PAGE = 2 * MIB
#: Aligned buffers bigger than this ask for huge pages: a big file's chunks (8 MiB), not the
#: small files' groups (up to 2 MiB, written through the page cache), where a fresh huge page
#: costs the kernel a compaction and saves nothing.
HUGE_FROM = 2 * HUGE_PAGE
#: ``buffer`` reuses mappings from this size on (a whole file for one PUT, 4-16 MiB): fresh
#: bytearrays of that size came from the C heap (glibc serves them from it once one is freed),
#: zeroed by calloc for each. The peak was the same either way for an S3 upload's parts (since
#: read into aligned buffers, ``s3.bodies``); their CPU was lower (docs/data-path.md).
REUSED_FROM = HUGE_FROM
#: ``sys.getrefcount`` of a mapping no view refers to any more: the local name and the argument.
_UNSHARED = 2


class ByteBudget:
    """A first-come-first-served counting semaphore measured in bytes.

    Futures are created per wait, so one budget can serve several event loops in turn
    (as in tests); it is not thread-safe.
    """

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError("budget must be positive")
        self.limit = limit
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        # Idle aligned buffers by size; with those in use they never map more than ``limit``.
        self._idle: dict[int, list[mmap.mmap]] = {}
        self.idle_bytes = 0
        _BUDGETS.add(self)

    async def acquire(self, nbytes: int) -> int:
        """Wait until ``nbytes`` (capped at the limit) are free; returns what was taken."""
        nbytes = min(nbytes, self.limit)
        if not self._waiters and self.used + nbytes <= self.limit:
            self.used += nbytes
            return nbytes
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, fut)
        self._waiters.append(entry)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release(nbytes)  # granted just as we were cancelled
            else:
                self._waiters.remove(entry)
                self._wake()
            raise
        return nbytes

    def release(self, nbytes: int) -> None:
        """Give back what ``acquire`` returned."""
        self.used -= nbytes
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            nbytes, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if self.used + nbytes > self.limit:
                return
            self._waiters.popleft()
            self.used += nbytes
            fut.set_result(None)

    @asynccontextmanager
    async def buffer(self, nbytes: int) -> AsyncIterator[memoryview]:
        """An ``nbytes`` buffer charged to the budget while the block runs.

        Under ``REUSED_FROM`` bytes (or over the limit), a fresh bytearray. From it, a view of
        a mapping of whole huge pages, reused as ``aligned``'s are (its contents whatever the
        last user left), unless a view of it outlived the block: that one is left to its holders.
        Fresh, such a mapping costs what a bytearray's heap memory does (8 MiB filled: 2.5-3.5
        ms of CPU either way, huge pages faulted in; 9-10 ms with 4 KiB pages).
        """
        size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
        if nbytes < REUSED_FROM or size > self.limit:
            taken = await self.acquire(nbytes)
            try:
                yield memoryview(bytearray(nbytes))
            finally:
                self.release(taken)
            return
        taken = await self.acquire(size)
        mapping = self._take_idle(size)
        whole = memoryview(mapping)
        view = whole[:nbytes]
        try:
            yield view
        finally:
            view.release()
            whole.release()
            if sys.getrefcount(mapping) == _UNSHARED:  # no view of it left but ours
                self._keep_idle(mapping)
            self.release(taken)

    @asynccontextmanager
    async def aligned(self, nbytes: int) -> AsyncIterator[memoryview]:
        """A page-aligned ``nbytes`` buffer, reused after the block, charged while it runs.

        Its contents are whatever the last user left. Nothing may keep a view of it past
        the block (the next user would overwrite it): pass it only to calls awaited within.
        """
        if nbytes <= 0:
            raise ValueError("an aligned buffer needs at least one byte")
        taken = await self.acquire(nbytes)
        buffer = self._take_idle(nbytes)
        view = memoryview(buffer)
        try:
            yield view
        finally:
            view.release()
            self._keep_idle(buffer)
            self.release(taken)

    def drop_idle(self) -> None:
        """Unmap the idle aligned buffers (when no transfer is running)."""
        self._idle.clear()
        self.idle_bytes = 0

    def _take_idle(self, nbytes: int) -> mmap.mmap:
        """An idle buffer of exactly ``nbytes`` (this budget's, else another's), or a new one.

        A new one first evicts idle buffers, this budget's, then every budget's, to make room
        (``used`` counts the new one already: ``acquire`` came first).
        """
        for budget in (self, *(b for b in _BUDGETS if b is not self)):
            buffer = budget._pop_idle(nbytes)
            if buffer is not None:
                return buffer
        while self._idle and self.idle_bytes + self.used > self.limit:
            self._evict_one()
        for other in list(_BUDGETS):
            while other._idle and _mapped() > self.limit:
                other._evict_one()
        return map_aligned(nbytes)

    def _pop_idle(self, nbytes: int) -> mmap.mmap | None:
        idle = self._idle.get(nbytes)
        if not idle:
            return None
        self.idle_bytes -= nbytes
        buffer = idle.pop()
        if not idle:
            del self._idle[nbytes]  # an empty list left here would be "evicted" from below
        return buffer

    def _evict_one(self) -> None:
        """Unmap one idle buffer (of the size kept idle longest)."""
        size, buffers = next(iter(self._idle.items()))
        buffers.pop()
        self.idle_bytes -= size
        if not buffers:
            del self._idle[size]

    def _keep_idle(self, buffer: mmap.mmap) -> None:
        """Keep ``buffer`` for reuse if this budget's idle buffers and those in use fit in its limit."""
        if self.idle_bytes + self.used <= self.limit:
            self._idle.setdefault(len(buffer), []).append(buffer)
            self.idle_bytes += len(buffer)


#: Every budget of the process (each adds itself), whose idle buffers any budget may take or evict.
_BUDGETS: weakref.WeakSet[ByteBudget] = weakref.WeakSet()


def _mapped() -> int:
    """What every budget of the process holds: its buffers in use and its idle ones."""
    return sum(b.used + b.idle_bytes for b in _BUDGETS)


def map_aligned(nbytes: int) -> mmap.mmap:
    """A fresh private, page-aligned mapping of ``nbytes``; huge pages asked for from ``HUGE_FROM`` on.

    The kernel (6.7 and later) places a mapping that is a whole number of huge pages on a
    huge-page boundary by itself; where it does not, or has no THP, the pages are 4 KiB.
    """
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if nbytes >= HUGE_FROM and hasattr(mmap, "MADV_HUGEPAGE"):
        with suppress(OSError):  # THP compiled out or disabled: 4 KiB pages then
            buffer.madvise(mmap.MADV_HUGEPAGE)
    return buffer


_default_budget: ByteBudget | None = None


def default_budget() -> ByteBudget:
    """The process-wide budget that backends share unless given their own."""
    global _default_budget
    if _default_budget is None:
        _default_budget = ByteBudget(DEFAULT_BUDGET_BYTES)
    return _default_budget
