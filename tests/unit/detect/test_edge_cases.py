"""The races and look-alikes each format's own code allows."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from tests.unit.detect.helpers import NothingKnown, complete, make_spec
from tests.unit.detect.layouts import LAYOUTS, save_dcp, truncate, write_safetensors, write_torch
from tierd.daemon.detect.registry import AUTO_ORDER, BY_NAME
from tierd.daemon.detect.scan import detect_path, scan_chain, scan_root

LAYOUT = {layout.name: layout for layout in LAYOUTS}


def _age(path: Path, seconds: float) -> None:
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def test_dcp_overwrite_in_progress_is_not_complete(tmp_path: Path) -> None:
    """Writing over an old step keeps the old .metadata while the new shards land."""
    root = tmp_path / "job"
    save_dcp(root / "step_5", 5)
    _age(root / "step_5" / ".metadata", 60)
    shard = next((root / "step_5").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes())  # rewritten now, after the old metadata
    assert complete(make_spec(root, tmp_path)) == []


def test_dcp_metadata_still_being_written_is_not_complete(tmp_path: Path) -> None:
    """A writer that opens ``.metadata`` in place leaves it empty, then half-written, for a while."""
    root = tmp_path / "job"
    save_dcp(root / "step_5", 5)
    meta = root / "step_5" / ".metadata"
    data = meta.read_bytes()
    meta.write_bytes(b"")
    assert complete(make_spec(root, tmp_path)) == []
    meta.write_bytes(data[: len(data) // 2])
    assert complete(make_spec(root, tmp_path)) == []
    meta.write_bytes(data)
    assert len(complete(make_spec(root, tmp_path))) == 1


def test_dcp_unreadable_metadata_is_looked_at_again_once_settled_then_trusted(tmp_path: Path) -> None:
    """The README's hand-made ``{}`` (or an empty file): not complete until unchanged for 10 s,
    and the verdict says when to look again, so no event or reconcile is needed."""
    root = tmp_path / "job"
    for step, content in ((5, b"{}\n"), (6, b"")):
        save_dcp(root / f"step_{step}", step)
        (root / f"step_{step}" / ".metadata").write_bytes(content)
    found = scan_root(make_spec(root, tmp_path), NothingKnown())
    assert [f.verdict.complete for f in found] == [False, False]
    for f in found:
        assert f.verdict.retry_after is not None
        assert 0 < f.verdict.retry_after <= 10.1, f.verdict
    _age(root, 10)
    assert [f.step for f in complete(make_spec(root, tmp_path))] == [5, 6]


def test_dcp_shard_named_by_metadata_must_exist_and_be_long_enough(tmp_path: Path) -> None:
    root = tmp_path / "job"
    save_dcp(root / "step_5", 5)
    assert len(complete(make_spec(root, tmp_path))) == 1
    shard = next((root / "step_5").glob("*.distcp"))
    data = shard.read_bytes()
    truncate(shard, 0.8)
    assert complete(make_spec(root, tmp_path)) == []
    shard.unlink()
    assert complete(make_spec(root, tmp_path)) == []
    shard.write_bytes(data)
    assert len(complete(make_spec(root, tmp_path))) == 1


def test_deepspeed_latest_before_every_rank_finished(tmp_path: Path) -> None:
    """Rank 0 writes ``latest`` with no barrier before it: a slower rank may not be done."""
    root = tmp_path / "job"
    LAYOUT["deepspeed"].uncommitted(root, 7)
    (root / "global_step7" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    (root / "latest").write_text("global_step7")
    assert complete(make_spec(root, tmp_path)) == []
    (root / "latest").write_text("")  # latest truncated, not yet rewritten
    assert complete(make_spec(root, tmp_path)) == []


def test_deepspeed_custom_tag_named_by_latest(tmp_path: Path) -> None:
    root = tmp_path / "job"
    d = root / "run-epoch3-step300"
    write_torch(d / "mp_rank_00_model_states.pt", {"dp_world_size": 1, "mp_world_size": 1})
    write_torch(d / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (root / "latest").write_text("run-epoch3-step300")
    (hit,) = complete(make_spec(root, tmp_path))
    assert (hit.detector.name, hit.step) == ("deepspeed", 300)


def test_hf_wrapping_deepspeed_is_one_hf_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "job"
    LAYOUT["hf"].uncommitted(root, 30)
    LAYOUT["deepspeed"].uncommitted(root / "out" / "checkpoint-30", 30)
    (root / "out" / "checkpoint-30" / "latest").write_text("global_step30")
    assert complete(make_spec(root, tmp_path)) == []  # trainer_state.json not yet written
    LAYOUT["hf"].commit(root, 30)
    (hit,) = complete(make_spec(root, tmp_path))
    assert hit.detector.name == "hf"
    assert any(f.path.name == "latest" for f in hit.verdict.files)
    shutil.rmtree(root / "out" / "checkpoint-30" / "global_step30")
    assert complete(make_spec(root, tmp_path)) == []


def test_hf_tmp_checkpoint_is_never_recorded(tmp_path: Path) -> None:
    root = tmp_path / "job"
    LAYOUT["hf"].uncommitted(root, 9)
    LAYOUT["hf"].commit(root, 9)
    (root / "out" / "checkpoint-9").rename(root / "out" / "tmp-checkpoint-9")
    assert scan_root(make_spec(root, tmp_path), NothingKnown()) == []


def test_megatron_torch_dist_is_megatron_not_dcp(tmp_path: Path) -> None:
    root = tmp_path / "job"
    iter_dir = root / "iter_0000100"
    save_dcp(iter_dir, 100)
    write_torch(iter_dir / "common.pt", {"args": {}})
    (iter_dir / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    (root / "latest_checkpointed_iteration.txt").write_text("50")
    found = scan_root(make_spec(root, tmp_path), NothingKnown())
    assert [(f.detector.name, f.verdict.complete) for f in found] == [("megatron", False)]
    (root / "latest_checkpointed_iteration.txt").write_text("100")
    (hit,) = complete(make_spec(root, tmp_path))
    assert (hit.detector.name, hit.step) == ("megatron", 100)


def test_megatron_release(tmp_path: Path) -> None:
    root = tmp_path / "job"
    write_torch(root / "release" / "mp_rank_00" / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("release")
    (hit,) = complete(make_spec(root, tmp_path))
    assert (hit.detector.name, hit.step) == ("megatron", 0)


def test_nemo_distributed_directory_and_ema(tmp_path: Path) -> None:
    root = tmp_path / "job"
    base = "gpt--val_loss=1.5-step=60-consumed_samples=480.0"
    save_dcp(root / base, 60)
    (root / base / "metadata.json").write_text("{}")
    (root / f"{base}-unfinished").touch()
    assert [f.detector.name for f in scan_root(make_spec(root, tmp_path), NothingKnown())] == ["nemo"]
    assert complete(make_spec(root, tmp_path)) == []
    (root / f"{base}-unfinished").unlink()
    (hit,) = complete(make_spec(root, tmp_path))
    assert (hit.detector.name, hit.step, hit.candidate.path) == ("nemo", 60, root / base)


def test_nemo_ema_file_belongs_to_its_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "job"
    write_torch(root / "m--step=5.ckpt")
    write_torch(root / "m--step=5-EMA.ckpt")
    (hit,) = complete(make_spec(root, tmp_path))
    assert sorted(f.path.name for f in hit.verdict.files) == ["m--step=5-EMA.ckpt", "m--step=5.ckpt"]


def test_lightning_copy_growing_under_final_name(tmp_path: Path) -> None:
    """fsspec moves Lightning's temp file from /tmp: across file systems that is a copy."""
    root = tmp_path / "job"
    path = write_torch(root / "epoch=0-step=100.ckpt", {"w": torch.randn(4096)})
    truncate(path, 0.7)
    assert complete(make_spec(root, tmp_path)) == []


def test_orbax_commit_file_mode(tmp_path: Path) -> None:
    root = tmp_path / "job"
    step = root / "300"
    (step / "default").mkdir(parents=True)
    (step / "default" / "_METADATA").write_text("{}")
    (step / "_CHECKPOINT_METADATA").write_text(json.dumps({"init_timestamp_nsecs": 1}))
    assert [f.verdict.complete for f in scan_root(make_spec(root, tmp_path), NothingKnown())] == [False]
    (step / "commit_success.txt").write_text("Checkpoint commit was successful")
    (hit,) = complete(make_spec(root, tmp_path))
    assert (hit.detector.name, hit.step) == ("orbax", 300)


def test_torch_save_temporary_names_are_ignored(tmp_path: Path) -> None:
    root = tmp_path / "job"
    for name in ("a_step1.pt.tmp", "a_step2.pt~", ".a_step3.pt", "a_step4.pt.partial", "a_step5.tmp.pt"):
        write_torch(root / name)
    assert scan_root(make_spec(root, tmp_path), NothingKnown()) == []


def test_legacy_torch_save_waits_to_settle(tmp_path: Path) -> None:
    root = tmp_path / "job"
    path = root / "iter_500.pt"
    root.mkdir()
    torch.save({"w": torch.ones(4)}, path, _use_new_zipfile_serialization=False)
    spec = make_spec(root, tmp_path, settle_seconds=30)
    (found,) = scan_root(spec, NothingKnown())
    assert not found.verdict.complete
    assert found.verdict.retry_after is not None
    assert 0 < found.verdict.retry_after <= 30
    _age(path, 31)
    (hit,) = complete(spec)
    assert hit.step == 500


def test_run_pattern_names_the_run(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    LAYOUT["dcp"].uncommitted(root / "llama-7b", 3)
    LAYOUT["dcp"].commit(root / "llama-7b", 3)
    LAYOUT["dcp"].uncommitted(root / "x", 4)
    LAYOUT["dcp"].commit(root / "x", 4)
    spec = make_spec(root, tmp_path, run_pattern=r"(?P<run>llama-[^/]+)/")
    assert [(f.run, f.step) for f in complete(spec)] == [("llama-7b", 3)]


def test_scan_chain_looks_only_where_the_event_was(tmp_path: Path) -> None:
    root = tmp_path / "job"
    for step in (1, 2):
        LAYOUT["deepspeed"].uncommitted(root, step)
    LAYOUT["deepspeed"].commit(root, 2)
    spec = make_spec(root, tmp_path)
    inside = scan_chain(spec, root / "global_step2", NothingKnown())
    assert [f.step for f in inside] == [2]
    beside_latest = scan_chain(spec, root, NothingKnown())  # the event was ``latest``
    assert sorted(f.step for f in beside_latest if f.verdict.complete) == [1, 2]


def test_known_steps_are_not_opened_again(tmp_path: Path) -> None:
    root = tmp_path / "job"
    LAYOUT["dcp"].uncommitted(root, 1)
    LAYOUT["dcp"].commit(root, 1)

    class Known(NothingKnown):
        def has_step(self, run: str, step: int) -> bool:
            return step == 1

    assert scan_root(make_spec(root, tmp_path), Known()) == []


def test_detect_path_for_notify(tmp_path: Path) -> None:
    root = tmp_path / "job"
    LAYOUT["dcp"].uncommitted(root, 8)
    spec = make_spec(root, tmp_path)
    result = detect_path(root / "step_8", spec.root, AUTO_ORDER, spec.settings)
    assert result is not None
    assert result[0].name == "dcp"
    assert not result[2].complete
    assert detect_path(root / "nothing", spec.root, AUTO_ORDER, spec.settings) is None
    pinned = detect_path(root / "step_8", spec.root, (BY_NAME["orbax"],), spec.settings)
    assert pinned is None


def test_safetensors_only_hf_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "job"
    d = root / "checkpoint-12"
    write_safetensors(d / "model-00001-of-00002.safetensors")
    write_safetensors(d / "model-00002-of-00002.safetensors")
    (d / "trainer_state.json").write_text(json.dumps({"global_step": 12}))
    (hit,) = complete(make_spec(root, tmp_path))
    assert hit.step == 12
    (d / "trainer_state.json").write_text('{"global_step": 1')  # being rewritten
    assert complete(make_spec(root, tmp_path)) == []


def test_other_formats_shards_are_not_single_file_checkpoints(tmp_path: Path) -> None:
    """A DeepSpeed tag directory ``latest`` does not name yet holds ``.pt`` files: not checkpoints."""
    root = tmp_path / "job"
    d = root / "epoch3"
    write_torch(d / "mp_rank_00_model_states.pt")
    write_torch(d / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    write_torch(d / "rng_state_0.pth")
    assert scan_root(make_spec(root, tmp_path), NothingKnown()) == []


def test_a_checkpoint_being_deleted_is_not_detected(tmp_path: Path) -> None:
    """Retention renames a step out of sight before removing it: the scan never offers it."""
    root = tmp_path / "job"
    save_dcp(root / "step_5", 5)
    save_dcp(root / "step_6", 6)
    (root / "step_5").rename(root / ".step_5.tierd-deleting")
    assert [f.step for f in scan_root(make_spec(root, tmp_path), NothingKnown())] == [6]
