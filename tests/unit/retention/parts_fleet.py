"""Three nodes on one catalog, each with its own tier 0, with real DCP steps recorded in parts
across them and copied to the shared tiers by the nodes' own pipelines.

``make_fleet`` builds one; ``copied_fleet`` gives a test a copy of one built once per process.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import posix_config_dict
from tests.fixtures.pipeline_run import run_pipeline_until
from tests.unit.detect.fleet import dcp_across, reconcile, step_row
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.service import PipelineService
from tierd.daemon.transfer.retry import Backoff

if TYPE_CHECKING:
    from tests.fixtures.postgres import PostgresServer

__all__ = ["FleetCopy", "copied_fleet", "make_fleet", "node_context", "part_states", "step_dir"]

FAST = PipelineOptions(
    poll_interval=0.02,
    lease_seconds=30,
    renew_interval=0.05,
    progress_interval=0.02,
    file_attempts=3,
    file_backoff=Backoff(base=0.001, cap=0.01),
    job_backoff=Backoff(base=0.05, cap=0.05),
)
SHARED = ("pfs", "object", "replica")


def node_context(db: Database, root: Path, node: str, delay: str) -> Context:
    """Node ``node``: its own tier 0 (scrubbed daily) keeping the newest step (after ``delay``);
    three shared tiers."""
    shared = posix_config_dict(root / "shared")
    own = root / node / "nvme"
    scrub = {"every": "1d", "bandwidth": "1GB"}
    nvme = {"name": "nvme", "kind": "posix", "path": str(own), "retention": {"keep_last": 1}, "scrub": scrub}
    tiers = [{**nvme, "delete_delay": delay}, *shared["tiers"][1:]]
    for tier in tiers:
        Path(tier["path"]).mkdir(parents=True, exist_ok=True)
    watch = {"path": str(own / "demo"), "run": "demo", "format": "auto", "settle_seconds": 0.5, "nodes": 3}
    restores = {"allowed_roots": [str(root / "restores")]}
    (root / "restores").mkdir(exist_ok=True)
    data: dict[str, Any] = posix_config_dict(
        root / node, node=node, tiers=tiers, watch=[watch], restore=restores
    )
    return Context(config=Config(**data), db=db)


def part_states(db: Database, step: int) -> tuple[str, dict[str, str]]:
    """The step's tier-0 replica state and each node's part state there."""
    row = step_row(db, step)
    assert row is not None
    nvme = next(r.state for r in row.replicas if r.tier == "nvme")
    return nvme, {p.node: next(r.state for r in p.replicas if r.tier == "nvme") for p in row.parts}


async def make_fleet(db: Database, root: Path, delay: str) -> list[Context]:
    """Three nodes with steps 1 and 2 recorded and verified on every shared tier."""
    nodes = [node_context(db, root, f"n{i}", delay) for i in range(3)]
    for step in (1, 2):
        dcp_across(root / "scratch", nodes, step)
        for ctx in nodes:
            await reconcile(ctx)

    def copied() -> bool:
        rows = [step_row(db, step) for step in (1, 2)]
        return all(r is not None and all(x.state == "verified" for x in r.replicas) for r in rows)

    await run_pipeline_until([PipelineService(ctx, FAST) for ctx in nodes], copied, timeout=60)
    return nodes


def step_dir(ctx: Context, step: int) -> Path:
    """The step's directory on the node's own tier 0."""
    return ctx.config.watch[0].path / f"step_{step}"


@dataclass(frozen=True)
class FleetCopy:
    """A fleet as ``make_fleet`` leaves it: its own catalog, the nodes over it, and its root."""

    db: Database
    nodes: list[Context]
    root: Path


@dataclass(frozen=True)
class _Template:
    root: Path  # where every copy lives: the catalog records the files under it
    tree: Path
    catalog: str  # SQLite: the file; PostgreSQL: the template database's name


#: (backend, delete delay) -> the fleet built for it in this process.
_TEMPLATES: dict[tuple[str, str], _Template] = {}


async def copied_fleet(request: pytest.FixtureRequest, backend: str, delay: str) -> FleetCopy:
    """A copy of a fleet built once per process, backend and delay (what ``make_fleet`` returns).

    Building one (two steps detected on three nodes, copied by three pipelines) was most of each
    test's CPU; a copy of its catalog and of its directory tree (mtimes kept) is the same state.
    Every copy of a template lives at the template's root, since the catalog names the files
    there: the last test's copy is replaced (a process runs one test at a time).
    """
    template = _TEMPLATES.get((backend, delay)) or await _build(request, backend, delay)
    shutil.rmtree(template.root, ignore_errors=True)
    shutil.copytree(template.tree, template.root, symlinks=True)
    if backend == "sqlite":
        path = request.getfixturevalue("tmp_path") / "catalog.db"
        shutil.copyfile(template.catalog, path)
        db = Database(f"sqlite:///{path}")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        db = Database(server.create(f"t_{uuid.uuid4().hex[:12]}", template=template.catalog))
    nodes = [node_context(db, template.root, f"n{i}", delay) for i in range(3)]
    return FleetCopy(db, nodes, template.root)


async def _build(request: pytest.FixtureRequest, backend: str, delay: str) -> _Template:
    base: Path = request.getfixturevalue("tmp_path_factory").mktemp(f"parts-fleet-{backend}")
    if backend == "sqlite":
        catalog = str(base / "catalog.db")
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), base / "building.db")
        db = Database(f"sqlite:///{base / 'building.db'}")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        catalog = f"fleet_{uuid.uuid4().hex[:12]}"
        db = Database(server.create(catalog, template=request.getfixturevalue("migrated_postgres")))
    root = base / "root"
    await make_fleet(db, root, delay)
    db.dispose()  # PostgreSQL: a template has no open connection
    if backend == "sqlite":
        _snapshot(base / "building.db", catalog)
    shutil.copytree(root, base / "tree", symlinks=True)
    template = _Template(root, base / "tree", catalog)
    _TEMPLATES[(backend, delay)] = template
    return template


def _snapshot(source: Path, target: str) -> None:
    """Copy a SQLite catalog by SQLite's backup API, which reads what is still in the WAL too.

    A plain copy of the file after ``dispose`` once lost the fleet's writes (no step 1 in the
    copy): while any connection stays open, SQLite keeps them in the WAL beside the file.
    """
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)
