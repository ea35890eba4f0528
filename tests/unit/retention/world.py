"""A small world for the retention service: real tiers on disk (or S3), a real catalog.

Checkpoints are written as real files on the tiers that hold them and recorded with the
CRC64NVME of their bytes, as detection and the pipeline would have left them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.config import Config, PosixTier
from tierd.daemon import checksum
from tierd.daemon.backends import Backend, WriteRequest, make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Checkpoint, File, Replica, Run
from tierd.daemon.context import Context
from tierd.daemon.retention.service import RetentionService
from tierd.daemon.scrub import ScrubService

BASE = datetime(2026, 1, 1, tzinfo=UTC)
LATER_DAY = BASE + timedelta(days=1)


def crc(data: bytes) -> str:
    """The catalog's checksum text of ``data``."""
    running = checksum.Crc64()
    running.update(data)
    return running.hexdigest()


def posix_tier(root: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "posix", "path": str(root / name), **extra}


@dataclass
class World:
    """A config, a catalog, the tiers' backends and a retention service over them."""

    config: Config
    db: Database
    backends: dict[str, Backend]
    service: RetentionService
    sizes: dict[int, int] = field(default_factory=dict)

    @classmethod
    def make(cls, root: Path, db: Database, tiers: Sequence[dict[str, Any]], **top: Any) -> World:
        for tier in tiers:
            if tier["kind"] == "posix":
                Path(tier["path"]).mkdir(parents=True, exist_ok=True)
        settings: dict[str, Any] = {"catalog": {"url": db.url}, "api": {"listen": "127.0.0.1:0"}, **top}
        config = Config(tiers=list(tiers), **settings)
        backends = {t.name: make_backend(t) for t in config.tiers}
        ctx = Context(config=config, db=db)
        return cls(config, db, backends, RetentionService(ctx, backends))

    def tier_path(self, tier: str, relpath: str) -> Path:
        spec = next(t for t in self.config.tiers if t.name == tier)
        assert isinstance(spec, PosixTier)
        return spec.path / relpath

    async def add(
        self,
        step: int,
        *,
        on: Mapping[str, str],
        run: str = "demo",
        files: int = 2,
        size: int = 1024,
        minutes: int | None = None,
        metrics: Mapping[str, float] | None = None,
        state: str = "complete",
    ) -> int:
        """A checkpoint at ``step`` whose replica on each tier of ``on`` has the given state.

        Tiers holding a verified (or failed) replica get the files' bytes.
        """
        path = f"{run}/step{step:05d}"
        payload = {f"{path}/shard{i}.distcp": os.urandom(size) for i in range(files)}
        payload[f"{path}/.metadata"] = b"meta" + str(step).encode()
        for tier, replica_state in on.items():
            if replica_state in ("verified", "failed", "deleting"):
                await self._write(tier, payload)
        created = BASE + timedelta(minutes=step if minutes is None else minutes)
        with self.db.session() as s:
            run_row = s.scalars(select(Run).where(Run.name == run)).one_or_none() or Run(name=run)
            row = Checkpoint(
                run=run_row,
                step=step,
                path=path,
                format="dcp",
                state=state,
                created_at=created,
                completed_at=created if state == "complete" else None,
                total_bytes=sum(len(b) for b in payload.values()),
                file_count=len(payload),
                metrics=dict(metrics or {}),
            )
            for relpath, data in payload.items():
                row.files.append(
                    File(relpath=relpath, size=len(data), checksum_algo="crc64nvme", checksum=crc(data))
                )
            for index, tier in enumerate(t.name for t in self.config.tiers):
                if tier in on:
                    verified_at = created if on[tier] == "verified" else None
                    row.replicas.append(
                        Replica(tier=tier, tier_index=index, state=on[tier], verified_at=verified_at)
                    )
            s.add(row)
            s.flush()
            self.sizes[row.id] = row.total_bytes
            return row.id

    async def _write(self, tier: str, payload: Mapping[str, bytes]) -> None:
        from tierd.daemon.backends import BytesReader

        backend = self.backends[tier]
        for relpath, data in payload.items():
            await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))

    def states(self, checkpoint_id: int) -> dict[str, str]:
        with self.db.read_session() as s:
            rows = s.scalars(select(Replica).where(Replica.checkpoint_id == checkpoint_id))
            return {r.tier: r.state for r in rows}

    def replica(self, checkpoint_id: int, tier: str) -> Replica:
        with self.db.read_session() as s:
            return s.scalars(
                select(Replica).where(Replica.checkpoint_id == checkpoint_id, Replica.tier == tier)
            ).one()

    def checkpoint(self, checkpoint_id: int) -> Checkpoint:
        with self.db.read_session() as s:
            row = s.get(Checkpoint, checkpoint_id)
            assert row is not None
            return row

    def actions(self, checkpoint_id: int | None = None) -> list[tuple[str, str | None]]:
        with self.db.read_session() as s:
            query = select(AuditEvent.action, AuditEvent.tier).order_by(AuditEvent.id)
            if checkpoint_id is not None:
                query = query.where(AuditEvent.checkpoint_id == checkpoint_id)
            return [(a, t) for a, t in s.execute(query)]

    def exists(self, tier: str, checkpoint_id: int) -> bool:
        """Whether any recorded file of the checkpoint is still on a POSIX tier."""
        with self.db.read_session() as s:
            relpaths = list(s.scalars(select(File.relpath).where(File.checkpoint_id == checkpoint_id)))
        return any(self.tier_path(tier, r).exists() for r in relpaths)


@contextlib.asynccontextmanager
async def served_world(
    root: Path, db: Database, tokens: Mapping[str, str]
) -> AsyncIterator[tuple[World, str]]:
    """Tier ``nvme`` (keep_last 1, delete delay 1h) and durable ``pfs``, with the API serving them.

    ``tokens`` maps each role to its bearer token (named ``<role>-bot``); yields the world and
    the API's base URL.
    """
    configured = [{"name": f"{role}-bot", "token": token, "role": role} for role, token in tokens.items()]
    world = World.make(
        root,
        db,
        [
            posix_tier(root, "nvme", retention={"keep_last": 1}, delete_delay="1h"),
            posix_tier(root, "pfs"),
        ],
        api={"listen": "127.0.0.1:0", "tokens": configured},
    )
    ctx = world.service.ctx
    ctx.watcher_running = True
    ctx.retention = world.service
    ctx.scrub = ScrubService(ctx, world.backends)  # not started: verify calls use it
    api = ApiService(create_app(ctx), "127.0.0.1", 0)
    await api.start()
    try:
        yield world, f"http://127.0.0.1:{api.port}"
    finally:
        await api.stop(5)
