"""The shared transfer machinery: memory budget, bounded parallelism, CRC combining, paths."""

from __future__ import annotations

import asyncio
import ctypes
import os
from pathlib import Path

import pytest

from tierd.daemon import checksum
from tierd.daemon.backends import BytesReader, check_prefix, check_relpath
from tierd.daemon.backends.base import read_full
from tierd.daemon.backends.budget import REUSED_FROM, ByteBudget
from tierd.daemon.backends.concurrency import for_each, uninterrupted
from tierd.daemon.backends.hashing import combine_all, crc64
from tierd.daemon.backends.s3.multipart import MAX_PARTS, TARGET_PARTS, part_count, part_size_for
from tierd.errors import IntegrityError

MIB = 1024 * 1024


@pytest.mark.parametrize("good", ["a", "a/b.bin", "dir with space/ü.pt", ".metadata", "a/.hidden/..x"])
def test_clean_relpaths_pass(good: str) -> None:
    assert check_relpath(good) == good


@pytest.mark.parametrize("bad", ["", "/a", "a/", "a//b", ".", "..", "a/../b", "./a", "a/./b", "a\x00b"])
def test_unclean_relpaths_fail(bad: str) -> None:
    with pytest.raises(ValueError, match="path"):
        check_relpath(bad)


def test_prefixes_name_directories() -> None:
    assert check_prefix("") == ""
    assert check_prefix("/") == ""
    assert check_prefix("a/b") == "a/b/" == check_prefix("a/b/")
    with pytest.raises(ValueError, match="path"):
        check_prefix("../a")


async def test_budget_caps_and_orders_waiters() -> None:
    budget = ByteBudget(10)
    assert await budget.acquire(100) == 10  # capped: one huge request still proceeds alone
    order: list[str] = []

    async def take(name: str, n: int) -> None:
        got = await budget.acquire(n)
        order.append(name)
        budget.release(got)

    waiters = [asyncio.create_task(take("big", 8)), asyncio.create_task(take("small", 1))]
    await asyncio.sleep(0)
    assert order == []
    budget.release(10)
    await asyncio.gather(*waiters)
    assert order == ["big", "small"]  # first come, first served: no starvation of big parts
    assert budget.used == 0


async def test_budget_survives_cancelled_waiters() -> None:
    budget = ByteBudget(4)
    held = await budget.acquire(4)
    waiter = asyncio.create_task(budget.acquire(3))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    budget.release(held)
    assert budget.used == 0
    async with budget.buffer(4) as view:
        assert len(view) == 4
        assert budget.used == 4
    assert budget.used == 0


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


async def test_aligned_buffers_are_page_aligned_and_reused() -> None:
    budget = ByteBudget(4 * MIB)
    async with budget.aligned(MIB) as view:
        first = _address(view)
        assert first % 4096 == 0
        assert len(view) == MIB
        view[:3] = b"abc"
        assert budget.used == MIB
    assert budget.used == 0
    assert budget.idle_bytes == MIB
    async with budget.aligned(MIB) as view:
        assert _address(view) == first  # the same memory: no fresh pages to fault in
        assert view[:3].tobytes() == b"abc"
    with pytest.raises(ValueError, match="at least one byte"):
        async with budget.aligned(0):
            pass


async def test_big_buffers_are_reused_mappings_of_whole_huge_pages() -> None:
    """An S3 upload's parts: fresh bytearrays grew the C heap past the budget."""
    budget = ByteBudget(32 * MIB)
    async with budget.buffer(8 * MIB + 1) as view:
        first = _address(view)
        assert len(view) == 8 * MIB + 1
        assert budget.used == 10 * MIB  # whole 2 MiB pages, as mapped
        view[-1:] = b"z"
    assert budget.used == 0
    assert budget.idle_bytes == 10 * MIB
    async with budget.buffer(9 * MIB) as view:
        assert _address(view) == first  # no fresh pages to fault in
        assert view[8 * MIB : 8 * MIB + 1].tobytes() == b"z"
    async with budget.aligned(10 * MIB) as view:  # one pool with the aligned buffers
        assert _address(view) == first


async def test_a_big_buffer_a_view_outlives_is_left_to_it() -> None:
    budget = ByteBudget(32 * MIB)
    async with budget.buffer(REUSED_FROM) as view:
        view[:4] = b"kept"
        kept = view[:4]  # as a transport might hold what it has not sent yet
    assert budget.idle_bytes == 0
    async with budget.buffer(REUSED_FROM) as view:
        view[:4] = b"next"
    assert kept.tobytes() == b"kept"
    assert budget.idle_bytes == REUSED_FROM


async def test_small_buffers_are_fresh_and_zeroed() -> None:
    budget = ByteBudget(32 * MIB)
    async with budget.buffer(REUSED_FROM - 1) as view:
        view[:1] = b"x"
    async with budget.buffer(REUSED_FROM - 1) as view:
        assert view[:1].tobytes() == b"\0"
    assert budget.idle_bytes == 0


def _thp_mode() -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``); None without THP."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text.split("[", 1)[1].split("]", 1)[0]


def _anon_huge_kib(address: int) -> int:
    """``AnonHugePages`` of the mapping of this process that holds ``address``."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and head == "AnonHugePages:":
            return int(line.split()[1])
    raise AssertionError(f"no mapping holds {address:#x}")


async def test_big_aligned_buffers_are_backed_by_huge_pages() -> None:
    """An O_DIRECT write's requests hold a segment per physical page: 2 MiB pages, 4 MiB requests."""
    if _thp_mode() not in ("always", "madvise"):
        pytest.skip(f"transparent huge pages: {_thp_mode() or 'absent from this kernel'}")
    budget = ByteBudget(16 * MIB)
    async with budget.aligned(8 * MIB) as view:
        view[:] = b"x" * len(view)  # faulted in
        assert _anon_huge_kib(_address(view)) >= 4 * 1024  # ≥ 2 of 4 pages on a kernel that does not align
    async with budget.aligned(2 * MIB) as view:  # a small files' group takes ordinary pages
        view[:] = b"x" * len(view)
        assert _anon_huge_kib(_address(view)) == 0


async def test_idle_aligned_buffers_and_those_in_use_stay_within_the_limit() -> None:
    budget = ByteBudget(4 * MIB)

    async def hold(size: int, release: asyncio.Event) -> None:
        async with budget.aligned(size):
            assert budget.idle_bytes + budget.used <= budget.limit
            await release.wait()

    release = asyncio.Event()
    tasks = [asyncio.create_task(hold(MIB, release)) for _ in range(4)]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*tasks)
    assert budget.idle_bytes == 4 * MIB
    async with budget.aligned(2 * MIB) as view:  # another size: idle buffers make room
        assert len(view) == 2 * MIB
        assert budget.idle_bytes + budget.used <= budget.limit
    assert budget.idle_bytes + budget.used <= budget.limit
    budget.drop_idle()
    assert budget.idle_bytes == 0


async def test_a_size_whose_idle_buffers_were_all_taken_is_not_evicted_from() -> None:
    budget = ByteBudget(4 * MIB)
    async with budget.aligned(MIB):
        pass
    async with budget.aligned(2 * MIB):
        pass
    assert budget.idle_bytes == 3 * MIB
    # The only idle 1 MiB buffer taken again, then room made by evicting the 2 MiB one (was IndexError).
    async with budget.aligned(MIB), budget.aligned(3 * MIB) as view:
        assert len(view) == 3 * MIB
        assert budget.idle_bytes == 0
    assert budget.idle_bytes + budget.used <= budget.limit


async def test_a_budget_makes_room_from_another_budgets_idle_buffers() -> None:
    """A peer tier's receiving budget left its buffers idle; the daemon's hop then needs its own."""
    receiving, hops = ByteBudget(4 * MIB), ByteBudget(4 * MIB)
    async with receiving.aligned(MIB), receiving.aligned(MIB), receiving.aligned(MIB):
        pass
    assert receiving.idle_bytes == 3 * MIB
    async with hops.aligned(2 * MIB), hops.aligned(2 * MIB):  # fresh mappings: the other's idle goes
        assert receiving.idle_bytes + hops.idle_bytes + hops.used <= hops.limit
    assert receiving.idle_bytes == 0
    assert hops.idle_bytes == 4 * MIB


async def test_a_budget_reuses_another_budgets_idle_buffer_of_its_size() -> None:
    first, second = ByteBudget(4 * MIB), ByteBudget(4 * MIB)
    async with first.aligned(MIB) as view:
        address = _address(view)
    async with second.aligned(MIB) as view:
        assert _address(view) == address  # no fresh pages to fault in
        assert first.idle_bytes == 0
    assert second.idle_bytes == MIB


async def test_for_each_bounds_concurrency_and_raises_the_first_error() -> None:
    running, peak = 0, 0

    async def work(i: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001)
        running -= 1

    await for_each(range(20), work, 3)
    assert peak == 3

    started: list[int] = []

    async def fail_on_two(i: int) -> None:
        started.append(i)
        if i == 2:
            raise KeyError("boom")
        await asyncio.sleep(10)

    with pytest.raises(KeyError, match="boom"):
        await asyncio.wait_for(for_each(range(100), fail_on_two, 3), timeout=5)
    assert len(started) == 3  # the others were cancelled, nothing more started


async def test_part_crcs_combine_into_the_whole() -> None:
    data = os.urandom(3 * MIB + 17)
    pieces = [data[i : i + MIB] for i in range(0, len(data), MIB)]
    parts = [(await crc64(memoryview(p)), len(p)) for p in pieces]
    whole = checksum.Crc64()
    whole.update(data)
    assert checksum.encode(combine_all(parts)) == whole.hexdigest()
    assert combine_all([]) == 0
    assert checksum.encode(0) == "AAAAAAAAAAA="


async def test_read_full_refuses_a_short_source() -> None:
    view = memoryview(bytearray(10))
    await read_full(BytesReader(b"0123456789"), 0, view, where="t")
    assert bytes(view) == b"0123456789"
    with pytest.raises(IntegrityError, match="ended at byte 5"):
        await read_full(BytesReader(b"01234"), 0, view, where="t")


async def test_uninterrupted_finishes_before_cancelling() -> None:
    started, go_on = asyncio.Event(), asyncio.Event()
    ended: list[str] = []

    async def slow() -> None:
        started.set()
        await go_on.wait()
        ended.append("work")

    async def caller() -> None:
        try:
            await uninterrupted(slow())
        finally:
            ended.append("caller")

    task = asyncio.create_task(caller())
    await started.wait()
    task.cancel()
    go_on.set()  # the work ends only after the cancel
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["work", "caller"]


@pytest.mark.parametrize(
    ("size", "configured", "expected"),
    [
        (0, 64 * MIB, 64 * MIB),
        (10 * MIB, 8 * MIB, 8 * MIB),
        (100 * 1024 * MIB, 64 * MIB, 64 * MIB),
        (1024 * 1024 * MIB, 64 * MIB, 117 * MIB),  # 1 TiB: grown and rounded to a MiB
        (5 * 1024 * 1024 * MIB, 64 * MIB, 583 * MIB),  # 5 TiB, the S3 maximum
    ],
)
def test_part_size_grows_so_no_object_needs_too_many_parts(size: int, configured: int, expected: int) -> None:
    part = part_size_for(size, configured)
    assert part == expected
    assert part % MIB == 0
    assert part_count(size, part) <= TARGET_PARTS < MAX_PARTS
