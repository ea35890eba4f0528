"""Steps spanning nodes (SQLite and PostgreSQL): each node records its part, the catalog decides.

Each node is a Context with its own tier-0 directory and node name on the one catalog;
its detect service runs one reconcile pass (scan, then the waiting sweep) at a time.
"""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import torch

from tests.unit.detect.fleet import age, dcp_across, node_context, reconcile, step_missing, step_row
from tierd.api.schemas.checkpoints import CheckpointDetail
from tierd.daemon.catalog.checkpoints import get_checkpoint
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.parts import Expectation, missing_while_waiting
from tierd.daemon.detect.notify import notify_checkpoint


def _shown(db: Database, checkpoint_id: int) -> dict[str, Any]:
    """The checkpoint as ``GET /v1/checkpoints/{id}`` answers it."""
    with db.read_session() as session:
        row = get_checkpoint(session, checkpoint_id)
        return CheckpointDetail.of(row, missing_while_waiting(session, row)).model_dump(mode="json")


async def test_dcp_step_over_three_nodes_is_complete_only_with_every_shard(
    db: Database, tmp_path: Path
) -> None:
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=3) for i in range(3)]
    names = dcp_across(tmp_path / "scratch", nodes, 7)

    await reconcile(nodes[1])
    row = step_row(db, 7)
    assert row is not None
    assert row.state == "waiting", "a part was counted complete on its own"
    assert [p.node for p in row.parts] == ["n1"]
    assert row.replicas == [], "a waiting step has no replica to copy or restore"
    assert (row.expected_nodes, row.expected_source) == (3, "config")
    assert step_missing(db, 7).nodes == 2

    await reconcile(nodes[0])  # the coordinator: .metadata names every shard
    row = step_row(db, 7)
    assert row is not None
    assert row.state == "waiting"
    assert row.expected_source == "format"
    assert row.expected_files == names
    missing = step_missing(db, 7)
    assert missing.files == ("__0_2.distcp",)
    assert missing.file_count == 1
    assert missing.nodes_heard == ("n0", "n1")
    shown = _shown(db, row.id)
    tiers = {"nvme": "verified", "object": "pending", "pfs": "pending", "replica": "pending"}
    assert [(p["node"], p["files"]) for p in shown["parts"]] == [("n0", 2), ("n1", 1)]
    assert all({t: v["state"] for t, v in p["tiers"].items()} == tiers for p in shown["parts"])
    assert shown["missing"]["files"] == ["__0_2.distcp"]
    assert shown["missing"]["nodes_heard"] == ["n0", "n1"]
    assert shown["waiting_since"] is not None
    assert shown["replicas"] == []

    await reconcile(nodes[2])
    row = step_row(db, 7)
    assert row is not None
    assert row.state == "complete"
    assert row.file_count == 4
    assert row.waiting_since is None
    assert {p.node: p.file_count for p in row.parts} == {"n0": 2, "n1": 1, "n2": 1}
    assert sum(p.total_bytes for p in row.parts) == row.total_bytes
    assert {r.tier: r.state for r in row.replicas} == {
        "nvme": "verified",
        "pfs": "pending",
        "object": "pending",
        "replica": "pending",
    }
    assert not step_missing(db, 7)
    await reconcile(nodes[2])  # again: nothing recorded twice
    again = step_row(db, 7)
    assert again is not None
    assert len(again.parts) == 3


async def test_without_nodes_the_notify_file_list_makes_the_others_record_their_parts(
    db: Database, tmp_path: Path
) -> None:
    nodes = [node_context(db, tmp_path, f"n{i}") for i in range(2)]  # nodes: 1 on both
    names = dcp_across(tmp_path / "scratch", nodes, 9)

    await reconcile(nodes[1])
    assert step_row(db, 9) is None, "a lone node's shards, with nothing expecting them, were recorded"
    await reconcile(nodes[0])
    assert step_row(db, 9) is None, "a half-present DCP step was recorded on a single-node config"

    result = await notify_checkpoint(
        nodes[0], run="demo", step=9, path="demo/step_9", fmt=None, actor="test", expect=_files(names)
    )
    assert result.status == 202
    row = step_row(db, 9)
    assert row is not None
    assert row.state == "waiting"
    assert [p.node for p in row.parts] == ["n0"]
    assert step_missing(db, 9).files == ("__0_1.distcp",)

    await reconcile(nodes[1])  # the waiting sweep: the step spans nodes, n1 holds a part
    row = step_row(db, 9)
    assert row is not None
    assert row.state == "complete"
    assert [p.node for p in row.parts] == ["n0", "n1"]


async def test_world_size_names_the_ranks_not_heard_from(db: Database, tmp_path: Path) -> None:
    nodes = [node_context(db, tmp_path, f"n{i}") for i in range(2)]
    for index, ctx in enumerate(nodes):
        step = ctx.config.watch[0].path / "step_4"
        step.mkdir(parents=True)
        (step / f"__{index}_0.distcp").write_bytes(bytes(100 + index))
        age(step)
    result = await notify_checkpoint(
        nodes[1],
        run="demo",
        step=4,
        path="demo/step_4",
        fmt="dcp",
        actor="test",
        expect=Expectation(ranks=3, source="notify"),
    )
    assert result.status == 202
    missing = step_missing(db, 4)
    assert missing.ranks == (0, 2)
    assert missing.files == (".metadata",)
    await reconcile(nodes[0])
    missing = step_missing(db, 4)
    assert missing.ranks == (2,)
    row = step_row(db, 4)
    assert row is not None
    assert row.state == "waiting", "a DCP step without .metadata was completed"


async def test_a_huge_world_size_already_in_the_catalog_is_read_in_bounded_memory(
    db: Database, tmp_path: Path
) -> None:
    """A step recorded before notify bounded world_size (2**31 - 1 ranks): the waiting sweep and
    the API's view count every missing rank and list the first 1000 without building the range
    (which took 5.5 GiB, then a MemoryError, on every sweep and every GET /v1/checkpoints)."""
    ctx = node_context(db, tmp_path, "n0")
    step = ctx.config.watch[0].path / "step_4"
    step.mkdir(parents=True)
    (step / "__1_0.distcp").write_bytes(bytes(100))
    age(step)
    huge = 2**31 - 1
    result = await notify_checkpoint(
        ctx,
        run="demo",
        step=4,
        path="demo/step_4",
        fmt="dcp",
        actor="test",
        expect=Expectation(ranks=huge, source="notify"),
    )
    assert result.status == 202
    tracemalloc.start()
    try:
        missing = step_missing(db, 4)
        await reconcile(ctx)  # scan, then the waiting sweep
        shown = _shown(db, result.checkpoint_id)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (missing.rank_count, missing.ranks) == (huge - 1, (0, *range(2, 1001)))
    assert (shown["state"], shown["missing"]["rank_count"]) == ("waiting", huge - 1)
    assert shown["missing"]["ranks"] == [0, *range(2, 1001)]
    assert peak < 64 * 2**20, f"{peak} bytes at the peak for a step of {huge} ranks"


async def test_nodes_count_completes_a_format_without_metadata(db: Database, tmp_path: Path) -> None:
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=2, format="marker", marker="DONE") for i in range(2)]
    for index, ctx in enumerate(nodes):
        step = ctx.config.watch[0].path / "ckpt_12"
        step.mkdir(parents=True)
        (step / f"rank{index}.bin").write_bytes(bytes(10))
        if index == 0:
            (step / "DONE").write_text("")
        age(step)
    await reconcile(nodes[0])
    row = step_row(db, 12)
    assert row is not None
    assert row.state == "waiting", "the marker's node completed the step alone"
    await reconcile(nodes[1])
    row = step_row(db, 12)
    assert row is not None
    assert row.state == "complete"
    assert row.file_count == 3


async def test_a_part_still_being_written_waits_for_the_settle_time(db: Database, tmp_path: Path) -> None:
    ctx = node_context(db, tmp_path, "n1", nodes=2)
    step = ctx.config.watch[0].path / "step_3"
    step.mkdir(parents=True)
    (step / "__1_0.distcp").write_bytes(bytes(10))  # just written: not settled
    await reconcile(ctx)
    assert step_row(db, 3) is None
    age(step)
    await reconcile(ctx)
    row = step_row(db, 3)
    assert row is not None
    assert [p.node for p in row.parts] == ["n1"]


def _files(names: list[str]) -> Expectation:
    return Expectation(files=tuple(names), source="notify")


async def test_each_node_checks_only_its_part_and_tier_0_is_gone_when_every_part_is(
    db: Database, tmp_path: Path
) -> None:
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=3) for i in range(3)]
    dcp_across(tmp_path / "scratch", nodes, 8)
    services = [await reconcile(ctx) for ctx in nodes]
    for service in services:  # the other nodes' files are not on this node: no change
        await service.check_changes()
    row = step_row(db, 8)
    assert row is not None
    assert row.state == "complete", "a node took the others' files for missing"

    shutil.rmtree(nodes[1].config.watch[0].path / "step_8")
    await services[1].check_changes()
    row = step_row(db, 8)
    assert row is not None
    assert {r.tier: r.state for r in row.replicas}["nvme"] == "verified"
    assert {p.node: {r.tier: r.state for r in p.replicas}["nvme"] for p in row.parts} == {
        "n0": "verified",
        "n1": "deleted",
        "n2": "verified",
    }
    for index in (0, 2):
        shutil.rmtree(nodes[index].config.watch[0].path / "step_8")
        await services[index].check_changes()
    row = step_row(db, 8)
    assert row is not None
    assert {r.tier: r.state for r in row.replicas}["nvme"] == "deleted"


async def test_a_count_of_parts_never_completes_a_step_before_its_marker_lands(
    db: Database, tmp_path: Path
) -> None:
    """The coordinator's shard, stable before its ``.metadata`` lands, is recorded as a part:
    with ``nodes: 2`` the two parts must not complete the step; the marker landing later
    extends that part and only then completes it, ``.metadata`` recorded."""
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=2) for i in range(2)]
    names = dcp_across(tmp_path / "scratch", nodes, 11)
    coordinator = nodes[0].config.watch[0].path / "step_11"
    held = tmp_path / "held-metadata"
    shutil.move(coordinator / ".metadata", held)  # not written yet: the slow rank is elsewhere

    await reconcile(nodes[0])
    await reconcile(nodes[1])
    row = step_row(db, 11)
    assert row is not None
    assert [(p.node, p.marked) for p in row.parts] == [("n0", False), ("n1", False)]
    assert row.state == "waiting", "two parts without the format's marker were counted complete"
    missing = step_missing(db, 11)
    assert missing.nodes == 0
    assert missing.marker is True
    shown = _shown(db, row.id)
    assert shown["missing"]["marker"] is True

    shutil.move(held, coordinator / ".metadata")
    age(coordinator)
    await reconcile(nodes[0])  # the waiting sweep: n0's detector now calls the step complete
    row = step_row(db, 11)
    assert row is not None
    assert row.state == "complete"
    assert {p.node: (p.marked, p.file_count) for p in row.parts} == {"n0": (True, 2), "n1": (False, 1)}
    assert row.expected_files == names
    assert row.file_count == len(names)
    assert sum(p.total_bytes for p in row.parts) == row.total_bytes
    n0 = next(p for p in row.parts if p.node == "n0")
    assert {r.tier: r.bytes_done for r in n0.replicas}["nvme"] == n0.total_bytes
    await reconcile(nodes[0])  # again: nothing recorded twice
    again = step_row(db, 11)
    assert again is not None
    assert again.file_count == len(names)


def _deepspeed_shard(directory: Path, name: str, payload: dict[str, int]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(payload, directory / name)


async def test_a_deepspeed_step_over_two_nodes_waits_for_latest_on_the_coordinator(
    db: Database, tmp_path: Path
) -> None:
    """DeepSpeed's ``latest`` names the tag on rank 0's node only: the node that has it marks
    its part; two parts without it are not a step."""
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=2) for i in range(2)]
    for index, ctx in enumerate(nodes):
        tag = ctx.config.watch[0].path / "global_step5"
        if index == 0:
            _deepspeed_shard(tag, "mp_rank_00_model_states.pt", {"dp_world_size": 2, "mp_world_size": 1})
        _deepspeed_shard(tag, f"zero_pp_rank_{index}_mp_rank_00_optim_states.pt", {"rank": index})
        age(tag)

    await reconcile(nodes[0])
    await reconcile(nodes[1])
    row = step_row(db, 5)
    assert row is not None
    assert row.state == "waiting", "two DeepSpeed parts without latest were counted complete"
    assert step_missing(db, 5).marker is True

    (nodes[0].config.watch[0].path / "latest").write_text("global_step5")
    await reconcile(nodes[0])
    row = step_row(db, 5)
    assert row is not None
    assert row.state == "complete"
    assert {p.node: (p.marked, p.file_count) for p in row.parts} == {"n0": (True, 2), "n1": (False, 1)}
    assert row.file_count == 3
