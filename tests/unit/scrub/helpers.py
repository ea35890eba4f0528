"""A World (``tests.fixtures.world``) with scrubbed tiers, a scrubber over it, and ways to rot its bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from tests.fixtures.world import World, posix_tier
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, File, Replica
from tierd.daemon.scrub import ScrubService

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SCRUB = {"every": "7d", "bandwidth": "1MB"}


class FakeClock:
    """A monotonic clock that moves only when the scrubber sleeps (for the bandwidth cap)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        # A real clock always moves on; a float sum may not (1.0 + 1e-17 == 1.0), and the
        # bucket would then wait for ever on a rounding error of its balance.
        self.now += max(seconds, 1e-6)
        await asyncio.sleep(0)


def scrub_world(root: Path, db: Database, *, top: dict[str, Any] | None = None, **scrub: Any) -> World:
    """``nvme`` (not scrubbed), then ``pfs`` and ``archive``, both scrubbed with ``scrub`` settings.

    ``top`` adds top-level config (``api`` with its tokens).
    """
    settings = {**SCRUB, **scrub}
    return World.make(
        root,
        db,
        [
            posix_tier(root, "nvme"),
            posix_tier(root, "pfs", scrub=settings),
            posix_tier(root, "archive", scrub=settings),
        ],
        **(top or {}),
    )


def scrubber(
    world: World,
    *,
    clock: FakeClock | None = None,
    now: Callable[[], datetime] = lambda: NOW,
) -> ScrubService:
    """A ScrubService over the world (not started: tests drive its rounds)."""
    clock = clock or FakeClock()
    sleep: Callable[[float], Awaitable[None]] = clock.sleep
    service = ScrubService(world.service.ctx, world.backends, clock=clock, sleep=sleep, now=now)
    world.service.ctx.scrub = service
    return service


def relpaths(world: World, checkpoint_id: int) -> list[str]:
    with world.db.read_session() as s:
        query = select(File.relpath).where(File.checkpoint_id == checkpoint_id).order_by(File.relpath)
        return list(s.scalars(query))


def flip_byte(path: Path, offset: int = 0) -> None:
    """Rot one byte of a file in place (its size unchanged)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def set_checked(db: Database, checkpoint_id: int, tier: str, at: datetime | None) -> None:
    with db.session() as s:
        s.execute(
            update(Replica)
            .where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
            .values(checked_at=at)
        )


def events(db: Database, action: str) -> list[AuditEvent]:
    with db.read_session() as s:
        return list(s.scalars(select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.id)))


def sample(world: World, name: str, **labels: str) -> float:
    value = world.service.ctx.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def set_state(db: Database, checkpoint_id: int, tier: str, state: str) -> None:
    with db.session() as s:
        s.execute(
            update(Replica)
            .where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
            .values(state=state)
        )


def checksum_of(world: World, checkpoint_id: int, relpath: str) -> str:
    """The checksum the catalog recorded for one file at first sight."""
    with world.db.read_session() as s:
        query = select(File.checksum).where(File.checkpoint_id == checkpoint_id, File.relpath == relpath)
        return s.scalars(query).one()
