"""Three nodes on one catalog, each with its own tier 0, with real DCP steps recorded in parts
across them and copied to the shared tiers by the nodes' own pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import posix_config_dict
from tests.fixtures.pipeline_run import run_pipeline_until
from tests.unit.detect.fleet import dcp_across, reconcile, step_row
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.service import PipelineService
from tierd.daemon.transfer.retry import Backoff

__all__ = ["make_fleet", "node_context", "part_states", "step_dir"]

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
