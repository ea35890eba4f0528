"""DeepSpeed and Megatron steps spanning nodes: the tracker's node names every rank's file.

``nodes: N`` says the step spans nodes; the expected set comes from the format (the world
sizes its rank-0 files record), as DCP's comes from ``.metadata``, and is exact where a
count of parts is not: a node whose part lacks a rank's file does not complete the step, and
the file written there late is added to the part.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from pathlib import Path

from sqlalchemy import select

from tests.unit.detect.fleet import age, node_context, reconcile, step_missing, step_row
from tests.unit.detect.layouts import write_torch
from tierd.daemon.beneath import Root
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent
from tierd.daemon.context import Context
from tierd.daemon.detect.detector import Candidate, Settings
from tierd.daemon.detect.formats.deepspeed import deepspeed_expected, deepspeed_problem
from tierd.daemon.detect.formats.hf import HfDetector
from tierd.daemon.detect.formats.megatron import megatron_expected
from tierd.daemon.detect.known import load_known
from tierd.daemon.detect.service import DetectService
from tierd.daemon.detect.tree import walk_files


def _watch(ctx: Context) -> Path:
    return ctx.config.watch[0].path


def _deepspeed_part(ctx: Context, step: int, ranks: range, *, coordinator: bool, dp: int) -> Path:
    """This node's ZeRO shards of ``global_step{step}``; the coordinator's also model states, ``latest``."""
    tag = _watch(ctx) / f"global_step{step}"
    for rank in ranks:
        write_torch(tag / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    if coordinator:
        write_torch(
            tag / "mp_rank_00_model_states.pt", {"module": {}, "dp_world_size": dp, "mp_world_size": 1}
        )
    age(tag)
    if coordinator:
        (_watch(ctx) / "latest").write_text(f"global_step{step}")
    return tag


async def test_deepspeed_zero_shards_of_every_dp_rank_are_expected(db: Database, tmp_path: Path) -> None:
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=3, format="deepspeed") for i in range(3)]
    _deepspeed_part(nodes[0], 5, range(2), coordinator=True, dp=6)
    _deepspeed_part(nodes[1], 5, range(2, 3), coordinator=False, dp=6)  # rank 3's shard never came
    _deepspeed_part(nodes[2], 5, range(4, 6), coordinator=False, dp=6)

    await reconcile(nodes[0])
    row = step_row(db, 5)
    assert row is not None
    assert row.state == "waiting", "the coordinator's part was taken for the whole step"
    assert row.expected_source == "format"
    assert row.expected_files is not None
    assert len(row.expected_files) == 7  # six ZeRO shards and the model states
    missing = step_missing(db, 5)
    assert missing.file_count == 4
    assert missing.files[0] == "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"

    await reconcile(nodes[2])
    await reconcile(nodes[1])
    row = step_row(db, 5)
    assert row is not None
    assert len(row.parts) == 3
    assert row.state == "waiting", "three parts were counted complete without rank 3's shard"
    assert step_missing(db, 5).files == ("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt",)

    _deepspeed_part(nodes[1], 5, range(3, 4), coordinator=False, dp=6)  # the late rank's shard lands
    running = DetectService(nodes[1])  # as a running daemon has it: the step's part is known,
    running.known = load_known(db, "n1")  # so scans pass its directory by
    await running.reconcile()  # the scan, then the waiting sweep, which grows parts
    row = step_row(db, 5)
    assert row is not None
    assert row.state == "complete", "the late shard was not added to its node's part"
    assert {p.node: p.file_count for p in row.parts} == {"n0": 3, "n1": 2, "n2": 2}
    assert sum(p.total_bytes for p in row.parts) == row.total_bytes
    with db.read_session() as session:
        grown = session.scalars(select(AuditEvent).where(AuditEvent.action == "part_grown")).all()
    assert [(e.detail["node"], e.detail["files"]) for e in grown] == [("n1", 1)]


def test_deepspeed_layouts_whose_other_files_cannot_be_named_expect_nothing(tmp_path: Path) -> None:
    tag, root = tmp_path / "global_step1", Root(tmp_path)
    write_torch(tag / "mp_rank_00_model_states.pt", {"module": {}, "dp_world_size": 4, "mp_world_size": 1})
    write_torch(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    assert deepspeed_expected(tag, root, walk_files(tag, root)) == (
        "mp_rank_00_model_states.pt",
        *(f"zero_pp_rank_{d}_mp_rank_00_optim_states.pt" for d in range(4)),
    )
    write_torch(tag / "layer_01-model_00-model_states.pt")  # pipeline layers: per stage, unknowable
    assert deepspeed_expected(tag, root, walk_files(tag, root)) is None
    (tag / "layer_01-model_00-model_states.pt").unlink()
    write_torch(tag / "mp_rank_00_model_states.pt", {"module": {}})  # no world sizes recorded
    assert deepspeed_expected(tag, root, walk_files(tag, root)) is None


def _megatron_args(tp: int, pp: int) -> argparse.Namespace:
    return argparse.Namespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, iteration=7)


def _megatron_part(ctx: Context, stage: int, *, coordinator: bool) -> None:
    """Pipeline stage ``stage`` (tp 2, pp 2, distributed optimizer) of ``iter_0000007`` on this node."""
    step = _watch(ctx) / "iter_0000007"
    for tp in range(2):
        rank_dir = step / f"mp_rank_{tp:02d}_{stage:03d}"
        write_torch(rank_dir / "model_optim_rng.pt", {"args": _megatron_args(2, 2), "iteration": 7})
        write_torch(rank_dir / "distrib_optim.pt")
    age(step)
    if coordinator:
        (_watch(ctx) / "latest_checkpointed_iteration.txt").write_text("7")


async def test_megatron_pipeline_stages_on_other_nodes_are_expected(db: Database, tmp_path: Path) -> None:
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=2, format="megatron") for i in range(2)]
    for stage, ctx in enumerate(nodes):
        _megatron_part(ctx, stage, coordinator=stage == 0)

    await reconcile(nodes[0])
    row = step_row(db, 7)
    assert row is not None
    assert row.state == "waiting", "stage 0's node completed a two-stage step alone"
    assert row.expected_source == "format"
    missing = step_missing(db, 7)
    assert missing.files == (
        "mp_rank_00_001/distrib_optim.pt",
        "mp_rank_00_001/model_optim_rng.pt",
        "mp_rank_01_001/distrib_optim.pt",
        "mp_rank_01_001/model_optim_rng.pt",
    )

    await reconcile(nodes[1])
    row = step_row(db, 7)
    assert row is not None
    assert row.state == "complete"
    assert row.file_count == 8


def test_megatron_expert_ranks_and_unknown_files(tmp_path: Path) -> None:
    step = tmp_path / "iter_0000001"
    args = argparse.Namespace(
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1, expert_model_parallel_size=2
    )
    write_torch(step / "mp_rank_00_000" / "model_optim_rng.pt", {"args": args})
    assert megatron_expected(step, Root(tmp_path)) == (
        "mp_rank_00_000/model_optim_rng.pt",
        "mp_rank_00_001/model_optim_rng.pt",
    )
    write_torch(step / "mp_rank_00_000" / "extra.pt")  # a file the sizes do not name
    assert megatron_expected(step, Root(tmp_path)) is None
    (step / "mp_rank_00_000" / "extra.pt").unlink()
    write_torch(step / "mp_rank_00_000" / "model_optim_rng.pt", {"iteration": 1})  # no args
    assert megatron_expected(step, Root(tmp_path)) is None


def test_world_sizes_a_job_writes_are_bounded_before_anything_is_built(tmp_path: Path) -> None:
    """Tier 0 is the job's: a DeepSpeed model-states file, Megatron's args or an HF RNG file name
    may claim 2**31 ranks. Each detector ignores a size past tierd.limits instead of building a
    list of that many ranks (a MemoryError, or the OOM killer, at every reconcile)."""
    huge = 2**31
    tag = tmp_path / "global_step1"
    write_torch(
        tag / "mp_rank_00_model_states.pt", {"module": {}, "dp_world_size": huge, "mp_world_size": huge}
    )
    write_torch(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    step = tmp_path / "iter_0000001"
    args = argparse.Namespace(tensor_model_parallel_size=huge, pipeline_model_parallel_size=huge)
    write_torch(step / "mp_rank_00_000" / "model_optim_rng.pt", {"args": args})
    hf = tmp_path / "checkpoint-1"
    hf.mkdir()
    (hf / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": []}))
    for rank in (0, 99_999_999_999):
        write_torch(hf / f"rng_state_{rank}.pth", {"python": rank})
    tracemalloc.start()
    try:
        root = Root(tmp_path)
        expected = deepspeed_expected(tag, root, walk_files(tag, root)), megatron_expected(step, root)
        shards = deepspeed_problem(tag, root, walk_files(tag, root))
        rng = HfDetector().inspect(Candidate("hf", hf, 1, str(hf), root=root), Settings())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert expected == (None, None)
    assert shards is None  # judged by the shards present instead: rank 0's, all there is
    assert not rng.complete
    assert rng.reason == "RNG states of 99999999998 processes missing: " + str(list(range(1, 21)))
    assert peak < 16 * 2**20, f"{peak} bytes at the peak"
