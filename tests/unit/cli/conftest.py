"""The CLI against a real API served over HTTP on 127.0.0.1 (a ``tests.fixtures.world`` World behind it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.fixtures.world import World, served_world
from tierd.cli.main import main
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Hold

TOKENS = {"read": "r-token", "operate": "o-token", "admin": "a-token"}
BOTH = {"nvme": "verified", "pfs": "verified"}


@dataclass(frozen=True)
class Result:
    """What one ``tierd ...`` printed and its exit code."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


@dataclass
class Cli:
    """Runs ``tierd.cli.main`` against the served API (in a thread: the API runs on this loop)."""

    world: World
    url: str
    capsys: pytest.CaptureFixture[str]

    async def __call__(self, *argv: str, role: str = "admin") -> Result:
        self.capsys.readouterr()
        code = await asyncio.to_thread(main, [*argv, "--url", self.url, "--token", TOKENS[role]])
        out, err = self.capsys.readouterr()
        return Result(code, out, err)


@pytest.fixture
async def cli(tmp_path: Path, sqlite_db: Database, capsys: pytest.CaptureFixture[str]) -> AsyncIterator[Cli]:
    """Tier ``nvme`` (keep_last 1, delete delay 1h) and durable ``pfs``, with the API serving them."""
    async with served_world(tmp_path, sqlite_db, TOKENS) as (world, url):
        yield Cli(world, url, capsys)


def hold_names(world: World, checkpoint_id: int) -> list[str]:
    """The checkpoint's holds as the catalog has them."""
    with world.db.read_session() as s:
        return sorted(s.scalars(select(Hold.name).where(Hold.checkpoint_id == checkpoint_id)))
