"""Several nodes' daemons on one catalog, each with its own tier 0, sharing the other tiers."""

from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from sqlalchemy import select
from sqlalchemy.orm import selectinload
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from tests.conftest import posix_config_dict
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Part
from tierd.daemon.catalog.parts import Missing, missing_of
from tierd.daemon.context import Context
from tierd.daemon.detect.service import DetectService

__all__ = ["age", "dcp_across", "node_context", "reconcile", "save_dcp_files", "step_missing", "step_row"]


def node_context(db: Database, root: Path, node: str, **watch: Any) -> Context:
    """Node ``node``: tier 0 ``root/<node>/nvme`` watched as run ``demo``; pfs, object, replica shared."""
    shared = posix_config_dict(root / "shared")
    own = root / node / "nvme"
    tiers = [{"name": "nvme", "kind": "posix", "path": str(own)}, *shared["tiers"][1:]]
    for tier in tiers:
        Path(tier["path"]).mkdir(parents=True, exist_ok=True)
    data = posix_config_dict(
        root / node,
        node=node,
        tiers=tiers,
        watch=[{"path": str(own / "demo"), "run": "demo", "format": "auto", "settle_seconds": 0.5, **watch}],
    )
    return Context(config=Config(**data), db=db)


def age(directory: Path, seconds: float = 60.0) -> None:
    """Make every file under ``directory`` look written ``seconds`` ago (settled)."""
    past = time.time_ns() - int(seconds * 1e9)
    for path in directory.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(past, past))


def dcp_across(scratch: Path, nodes: list[Context], step: int) -> list[str]:
    """Save a real DCP step (one shard file per node) and spread it: node 0 also gets ``.metadata``.

    Returns the file names of the whole step.
    """
    whole = scratch / f"whole{step}"
    save_dcp_files(whole, step, len(nodes))
    shards = sorted(p.name for p in whole.iterdir() if p.name.endswith(".distcp"))
    assert len(shards) == len(nodes), f"the save wrote {shards} for {len(nodes)} nodes"
    for index, ctx in enumerate(nodes):
        target = ctx.config.watch[0].path / f"step_{step}"
        target.mkdir(parents=True, exist_ok=True)
        mine = shards[index :: len(nodes)] + ([".metadata"] if index == 0 else [])
        for name in mine:
            shutil.copy2(whole / name, target / name)
        age(target)
        if index == 0:  # the coordinator writes .metadata last
            meta = (target / ".metadata").stat().st_mtime_ns + 1_000_000_000
            os.utime(target / ".metadata", ns=(meta, meta))
    return sorted([".metadata", *shards])


def save_dcp_files(directory: Path, step: int, files: int) -> None:
    """A real single-process DCP save writing ``files`` shard files (one per writer thread)."""
    state = {f"layer{i}.w": torch.full((64,), float(step + i)) for i in range(files)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        writer = FileSystemWriter(str(directory), thread_count=files)
        dcp_save(state, storage_writer=writer, no_dist=True)


def step_row(db: Database, step: int) -> Checkpoint | None:
    """The step's row with its parts (and their replicas) and replicas loaded."""
    with db.read_session() as session:
        return session.scalars(
            select(Checkpoint)
            .where(Checkpoint.step == step)
            .options(
                selectinload(Checkpoint.parts).selectinload(Part.replicas),
                selectinload(Checkpoint.replicas),
            )
        ).one_or_none()


def step_missing(db: Database, step: int) -> Missing:
    """What the step lacks."""
    with db.read_session() as session:
        row = session.scalars(select(Checkpoint).where(Checkpoint.step == step)).one()
        return missing_of(session, row)


async def reconcile(ctx: Context) -> DetectService:
    """One reconcile pass of a detect service that is not watching (scan, changes, waiting)."""
    service = DetectService(ctx)
    await service.reconcile()
    return service
