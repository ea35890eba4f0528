"""Restores over a ``tests.fixtures.world.World`` (POSIX tiers, and S3 on moto), run by the real runner."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.world import World
from tierd.daemon.backends import Backend
from tierd.daemon.catalog import restores
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import owner_id
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.restores import RestoreRow
from tierd.daemon.context import Context
from tierd.daemon.restore.requests import RestoreRequest, request_restore
from tierd.daemon.restore.runner import RestoreOptions, RestoreRunner
from tierd.daemon.restore.service import RestoreService
from tierd.daemon.restore.source import Rebased
from tierd.daemon.transfer.retry import Backoff

FAST = RestoreOptions(poll_interval=0.05, progress_interval=0.02, file_backoff=Backoff(0.0, 0.0))


@dataclass
class RestoreWorld:
    """A World (tiers, catalog, checkpoints on disk) plus what runs restores over it."""

    world: World
    root: Path

    @classmethod
    def make(cls, root: Path, db: Database, tiers: Sequence[dict[str, Any]], **top: Any) -> RestoreWorld:
        (root / "restores").mkdir(exist_ok=True)
        top.setdefault("restore", {"allowed_roots": [str(root / "restores")]})
        return cls(World.make(root, db, tiers, **top), root)

    @property
    def db(self) -> Database:
        return self.world.db

    async def add(self, step: int, on: Mapping[str, str], files: Mapping[str, bytes]) -> int:
        """A DCP checkpoint ``demo/stepNNNNN`` of ``files`` (name -> bytes), on the tiers of ``on``.

        The n-th file's recorded mtime is n seconds (a restore to tier 0 gives each file back its own).
        """
        return await self.world.add(step, on=on, payload=files, mtimes=True)

    def ask(self, **fields: Any) -> int:
        """Queue a restore as the API would; returns its id."""
        return request_restore(self.db, self.world.config, RestoreRequest(**fields), actor="test")

    def runner(
        self, backends: Mapping[str, Backend] | None = None, claim: restores.RestoreClaim | None = None
    ) -> RestoreRunner:
        """A runner holding ``claim``, by default the next queued restore's."""
        owner = owner_id(self.world.config.node)
        if claim is None:
            claim = restores.claim_next_restore(
                self.db, owner, self.world.config.node, lease_seconds=60, now=utcnow()
            )
        assert claim is not None
        return RestoreRunner(
            config=self.world.config,
            db=self.db,
            backends=backends or self.world.backends,
            budget=None,
            owner=owner,
            claim=claim,
            options=FAST,
            wake_pipeline=lambda: None,
        )

    async def run(self, **fields: Any) -> RestoreRow:
        """Ask for a restore, run it to its end, and return it."""
        job_id = self.ask(**fields)
        await self.runner().run()
        return self.row(job_id)

    def row(self, job_id: int) -> RestoreRow:
        with self.db.read_session() as s:
            return restores.get_restore(s, job_id)

    def service(self, backends: Mapping[str, Backend]) -> RestoreService:
        ctx = Context(config=self.world.config, db=self.db)
        return RestoreService(ctx, backends, options=FAST)


class Gate(Rebased):
    """A tier whose reads, after the first ``free`` of them, wait until ``opened`` is set."""

    def __init__(self, inner: Backend, free: int = 1) -> None:
        super().__init__(inner, "")
        self.free = free
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()

    async def _pass(self) -> None:
        if self.free > 0:
            self.free -= 1
            return
        self.reached.set()
        await self.opened.wait()

    async def open_reader(self, relpath: str) -> Any:
        await self._pass()
        return await super().open_reader(relpath)

    async def read_whole(self, relpaths: Sequence[str], views: Sequence[memoryview]) -> Any:
        await self._pass()
        return await super().read_whole(relpaths, views)
