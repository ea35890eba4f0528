"""``tierd.integrations.dcp.save``: two ranks (gloo) save two steps, one with ``dcp.save`` and one
with ``dcp.async_save``; the coordinator notifies each with its metrics and the world size."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict_loader import load

from tests.fixtures.job_daemon import JobDaemon
from tests.fixtures.ranks import run_ranks
from tests.integration.daemon_helpers import wait_for
from tierd.integrations.dcp import save

RUN = "dcp-run"
WORLD = 2


def train(rank: int, init_file: str, run_dir: str, env: dict[str, str]) -> None:
    """One rank: a few steps of a tiny model, a checkpoint at steps 1 (sync) and 2 (async).

    ``env``: the job's ``TIERD_URL`` and ``TIERD_TOKEN`` (a forked rank has the forkserver's
    environment, not the test's).
    """
    os.environ.update(env)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    torch.manual_seed(rank)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (1, 2):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state = {f"rank{rank}": {k: v.detach().clone() for k, v in model.state_dict().items()}}
        path = Path(run_dir) / f"step{step}"
        metrics = {"loss": loss.item()}
        if step == 1:
            save(state, path, run=RUN, step=step, metrics=metrics, strict=True)
            continue
        pending = save(state, path, run=RUN, step=step, metrics=metrics, async_save=True)
        after_tierd = threading.Event()  # done-callbacks run in order: tierd's has run when this is set
        pending.add_done_callback(lambda _, done=after_tierd: done.set())
        pending.result(timeout=60)
        assert after_tierd.wait(60)
    dist.barrier()
    dist.destroy_process_group()


# dcp.load in this (non-distributed) process warns that it loads as a single process: it does.
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_the_coordinator_notifies_each_step_with_metrics_and_world_size(
    tierd: JobDaemon, tmp_path: Path
) -> None:
    run_dir = tierd.run_dir(RUN)
    env = {name: os.environ[name] for name in ("TIERD_URL", "TIERD_TOKEN")}
    run_ranks(train, (str(tmp_path / "init"), str(run_dir), env), WORLD)

    wait_for(lambda: len(tierd.checkpoints(RUN)) == 2, 30, "both steps to be recorded")
    recorded = tierd.checkpoints(RUN)
    assert {s: (c["state"], c["format"], c["path"]) for s, c in recorded.items()} == {
        1: ("complete", "dcp", f"{RUN}/step1"),
        2: ("complete", "dcp", f"{RUN}/step2"),
    }
    notified = tierd.notified(RUN)
    for step in (1, 2):
        metrics, detail = notified[step]
        assert set(metrics) == {"loss"}
        assert (detail["world_size"], detail["format"]) == (WORLD, "dcp")
    loaded = {"rank1": {"weight": torch.zeros(2, 4), "bias": torch.zeros(2)}}
    load(loaded, storage_reader=FileSystemReader(str(run_dir / "step2")), no_dist=True)
    assert loaded["rank1"]["weight"].abs().sum() > 0
