"""A running restore hands freed heap memory back to the OS as a hop does (``malloc_trim``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.restore import service


async def test_a_running_restore_trims_the_heap_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    trimmed = asyncio.Event()
    calls: list[int] = []

    def trim() -> bool:
        calls.append(1)
        if len(calls) == 3:
            trimmed.set()
        return True

    monkeypatch.setattr(service, "trim_freed_memory", trim)
    task = asyncio.create_task(service._trim_every(0.001))
    await asyncio.wait_for(trimmed.wait(), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(calls) >= 3


def test_the_last_restore_ending_unmaps_idle_buffers_and_trims(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def trim() -> bool:
        calls.append(1)
        return True

    monkeypatch.setattr(service, "trim_freed_memory", trim)
    budget = ByteBudget(1024 * 1024)
    budget.idle_bytes = 4096  # as if a buffer were kept for reuse
    running = SimpleNamespace(_running={1: object()}, budget=budget)
    service.RestoreService._drop_idle_buffers(running)  # type: ignore[arg-type]
    assert calls == []
    assert budget.idle_bytes == 4096
    running._running.clear()
    service.RestoreService._drop_idle_buffers(running)  # type: ignore[arg-type]
    assert calls == [1]
    assert budget.idle_bytes == 0
