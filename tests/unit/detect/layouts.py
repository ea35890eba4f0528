"""Checkpoint layouts as each format's own code writes them, in three stages.

``partial`` leaves the step half-written (a file cut short, the commit signal absent),
``uncommitted`` is a crash between the data and the commit signal (every byte written,
no marker / rename / tracker), ``commit`` does what the format does last. DCP and
``torch.save`` files are written by torch itself; the other formats' files are real
``torch.save`` zips and safetensors files in the directory layouts their code uses.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from awscrt import checksums
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

__all__ = ["LAYOUTS", "Layout", "crc64_b64", "manifest_of", "save_dcp", "truncate", "write_torch"]


def crc64_b64(path: Path) -> str:
    """An independent CRC64-NVME of the whole file, in S3's base64 spelling."""
    value = checksums.crc64nvme(path.read_bytes())
    return base64.b64encode(int(value).to_bytes(8, "big")).decode()


def write_torch(path: Path, payload: object | None = None) -> Path:
    """A real ``torch.save`` zip at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload if payload is not None else {"w": torch.arange(64, dtype=torch.float32)}, path)
    return path


def truncate(path: Path, fraction: float = 0.5) -> None:
    """Cut ``path`` short, as a writer interrupted half-way leaves it."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(max(int(size * fraction), 1))


def write_safetensors(path: Path, n: int = 32) -> Path:
    """A minimal but valid safetensors file (header length, JSON header, data)."""
    data = struct.pack(f"<{n}f", *range(n))
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def save_dcp(directory: Path, step: int, ranks_keys: int = 2) -> None:
    """A real single-process DCP checkpoint (FileSystemWriter) in ``directory``."""
    state: dict[str, object] = {f"layer{i}.w": torch.full((16,), float(step + i)) for i in range(ranks_keys)}
    state["extra"] = {"step": step}
    with warnings.catch_warnings():
        # Single-process saves are intended here; torch warns about them regardless.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings("ignore", message="Detected an existing checkpoint")
        dcp_save(state, storage_writer=FileSystemWriter(str(directory)), no_dist=True)


def manifest_of(path: Path) -> list[Path]:
    """Every regular file under ``path`` (or the file itself)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@dataclass(frozen=True)
class Layout:
    """One format's writer: three stages, where the checkpoint lives, its files."""

    name: str
    partial: Callable[[Path, int], None]
    uncommitted: Callable[[Path, int], None]
    commit: Callable[[Path, int], None]
    path: Callable[[Path, int], Path]
    files: Callable[[Path, int], list[Path]]
    marker: str | None = None


# -- DCP ---------------------------------------------------------------------------------


def _dcp_dir(root: Path, step: int) -> Path:
    return root / f"step_{step}"


def _dcp_partial(root: Path, step: int) -> None:
    d = _dcp_dir(root, step)
    save_dcp(d, step)
    (d / ".metadata").unlink()
    truncate(next(d.glob("*.distcp")))


def _dcp_uncommitted(root: Path, step: int) -> None:
    d = _dcp_dir(root, step)
    save_dcp(d, step)
    (d / ".metadata").rename(d / ".metadata.tmp")


def _dcp_commit(root: Path, step: int) -> None:
    d = _dcp_dir(root, step)
    (d / ".metadata.tmp").rename(d / ".metadata")


# -- DeepSpeed ---------------------------------------------------------------------------


def _ds_dir(root: Path, step: int) -> Path:
    return root / f"global_step{step}"


def _ds_write(root: Path, step: int, cut: bool) -> None:
    d = _ds_dir(root, step)
    write_torch(d / "mp_rank_00_model_states.pt", {"module": {}, "dp_world_size": 2, "mp_world_size": 1})
    for rank in range(2):
        write_torch(d / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", {"rank": rank})
    if cut:
        truncate(d / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt")


def _ds_commit(root: Path, step: int) -> None:
    (root / "latest").write_text(f"global_step{step}")


# -- Megatron ----------------------------------------------------------------------------


def _mg_dir(root: Path, step: int) -> Path:
    return root / f"iter_{step:07d}"


def _mg_write(root: Path, step: int, cut: bool) -> None:
    d = _mg_dir(root, step)
    for tp in range(2):
        write_torch(d / f"mp_rank_{tp:02d}" / "model_optim_rng.pt", {"iteration": step, "tp": tp})
    if cut:
        truncate(d / "mp_rank_01" / "model_optim_rng.pt")


def _mg_commit(root: Path, step: int) -> None:
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))


# -- NeMo --------------------------------------------------------------------------------


def _nemo_base(step: int) -> str:
    return f"megatron_gpt--val_loss=2.10-step={step}-consumed_samples={step * 8}.0"


def _nemo_path(root: Path, step: int) -> Path:
    return root / "checkpoints" / (_nemo_base(step) + ".ckpt")


def _nemo_write(root: Path, step: int, cut: bool) -> None:
    path = _nemo_path(root, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / (_nemo_base(step) + "-unfinished")).touch()
    write_torch(path, {"state_dict": {"w": torch.ones(8)}, "global_step": step})
    if cut:
        truncate(path)


def _nemo_commit(root: Path, step: int) -> None:
    (_nemo_path(root, step).parent / (_nemo_base(step) + "-unfinished")).unlink()


# -- Orbax -------------------------------------------------------------------------------


def _orbax_final(root: Path, step: int) -> Path:
    return root / str(step)


def _orbax_write(root: Path, step: int, stage: str) -> None:
    tmp = root / f"{step}.orbax-checkpoint-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    meta: dict[str, object] = {"init_timestamp_nsecs": time.time_ns(), "item_handlers": {}}
    (tmp / "_CHECKPOINT_METADATA").write_text(json.dumps(meta))
    item = tmp / "default.orbax-checkpoint-tmp"
    (item / "d").mkdir(parents=True, exist_ok=True)
    (item / "_METADATA").write_text(json.dumps({"tree_metadata": {"w": {}}}))
    (item / "manifest.ocdbt").write_bytes(os.urandom(256))
    (item / "d" / "0123abcd").write_bytes(os.urandom(4096))
    if stage == "partial":
        return
    shutil.rmtree(tmp / "default", ignore_errors=True)
    item.rename(tmp / "default")
    meta["commit_timestamp_nsecs"] = time.time_ns()
    (tmp / "_CHECKPOINT_METADATA").write_text(json.dumps(meta))


def _orbax_commit(root: Path, step: int) -> None:
    (root / f"{step}.orbax-checkpoint-tmp").rename(_orbax_final(root, step))


# -- Hugging Face Trainer ----------------------------------------------------------------


def hf_eval_loss(step: int) -> float:
    """The eval loss the HF layout's ``trainer_state.json`` logs at ``step``."""
    return 1.0 + 1.0 / step


def _hf_dir(root: Path, step: int) -> Path:
    return root / "out" / f"checkpoint-{step}"


def _hf_write(root: Path, step: int, cut: bool) -> None:
    d = _hf_dir(root, step)
    write_safetensors(d / "model.safetensors")
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    write_torch(d / "training_args.bin", {"lr": 1e-4})
    write_torch(d / "optimizer.pt", {"state": {}})
    write_torch(d / "scheduler.pt", {"last_epoch": step})
    for rank in range(2):
        write_torch(d / f"rng_state_{rank}.pth", {"python": rank})
    if cut:
        truncate(d / "model.safetensors")


def _hf_commit(root: Path, step: int) -> None:
    history = [
        {"loss": 9.0, "learning_rate": 1e-4, "epoch": 0.5, "step": step - 1},
        {"loss": 2.5, "grad_norm": 1.5, "epoch": 1.0, "step": step},
        {"eval_loss": hf_eval_loss(step), "eval_runtime": 0.1, "epoch": 1.0, "step": step},
    ]
    state = {"global_step": step, "log_history": history, "best_metric": None}
    (_hf_dir(root, step) / "trainer_state.json").write_text(json.dumps(state))


# -- nvidia-resiliency-ext local ---------------------------------------------------------


def _nvrx_session(root: Path, step: int) -> Path:
    return root / "local" / "sess"


def _nvrx_file(root: Path, step: int, rank: int, dirty: bool) -> Path:
    suffix = ".dirty" if dirty else ""
    return _nvrx_session(root, step) / str(rank) / f"iter_{step:07d}_{rank}_local{suffix}.pt"


def _nvrx_write(root: Path, step: int, cut: bool) -> None:
    for rank in range(2):
        write_torch(_nvrx_file(root, step, rank, dirty=True), {"rank": rank, "iteration": step})
    _nvrx_file(root, step, 0, True).rename(_nvrx_file(root, step, 0, False))
    if cut:
        truncate(_nvrx_file(root, step, 1, True))


def _nvrx_commit(root: Path, step: int) -> None:
    _nvrx_file(root, step, 1, True).rename(_nvrx_file(root, step, 1, False))


def _nvrx_files(root: Path, step: int) -> list[Path]:
    return [_nvrx_file(root, step, r, False) for r in range(2)]


# -- torch.save single files -------------------------------------------------------------


def _ts_path(root: Path, step: int) -> Path:
    return root / f"model_step{step}.pt"


def _ts_partial(root: Path, step: int) -> None:
    path = write_torch(_ts_path(root, step), {"w": torch.randn(256)})
    truncate(path)


def _ts_uncommitted(root: Path, step: int) -> None:
    write_torch(_ts_path(root, step).with_name(_ts_path(root, step).name + ".tmp"), {"w": torch.randn(256)})
    _ts_path(root, step).unlink(missing_ok=True)


def _ts_commit(root: Path, step: int) -> None:
    path = _ts_path(root, step)
    path.with_name(path.name + ".tmp").rename(path)


# -- marker ------------------------------------------------------------------------------


def _mk_dir(root: Path, step: int) -> Path:
    return root / f"ckpt-{step}"


def _mk_write(root: Path, step: int, cut: bool) -> None:
    d = _mk_dir(root, step)
    d.mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (d / f"shard{i}.bin").write_bytes(os.urandom(8192))
    if cut:
        truncate(d / "shard2.bin")


def _mk_commit(root: Path, step: int) -> None:
    (_mk_dir(root, step) / "COMMITTED").write_text("ok")


def _dir_files(where: Callable[[Path, int], Path]) -> Callable[[Path, int], list[Path]]:
    return lambda root, step: manifest_of(where(root, step))


LAYOUTS: list[Layout] = [
    Layout("dcp", _dcp_partial, _dcp_uncommitted, _dcp_commit, _dcp_dir, _dir_files(_dcp_dir)),
    Layout(
        "deepspeed",
        lambda r, s: _ds_write(r, s, True),
        lambda r, s: _ds_write(r, s, False),
        _ds_commit,
        _ds_dir,
        _dir_files(_ds_dir),
    ),
    Layout(
        "megatron",
        lambda r, s: _mg_write(r, s, True),
        lambda r, s: _mg_write(r, s, False),
        _mg_commit,
        _mg_dir,
        _dir_files(_mg_dir),
    ),
    Layout(
        "nemo",
        lambda r, s: _nemo_write(r, s, True),
        lambda r, s: _nemo_write(r, s, False),
        _nemo_commit,
        _nemo_path,
        _dir_files(_nemo_path),
    ),
    Layout(
        "orbax",
        lambda r, s: _orbax_write(r, s, "partial"),
        lambda r, s: _orbax_write(r, s, "uncommitted"),
        _orbax_commit,
        _orbax_final,
        _dir_files(_orbax_final),
    ),
    Layout(
        "hf",
        lambda r, s: _hf_write(r, s, True),
        lambda r, s: _hf_write(r, s, False),
        _hf_commit,
        _hf_dir,
        _dir_files(_hf_dir),
    ),
    Layout(
        "nvrx_local",
        lambda r, s: _nvrx_write(r, s, True),
        lambda r, s: _nvrx_write(r, s, False),
        _nvrx_commit,
        _nvrx_session,
        _nvrx_files,
    ),
    Layout("torch_save", _ts_partial, _ts_uncommitted, _ts_commit, _ts_path, _dir_files(_ts_path)),
    Layout(
        "marker",
        lambda r, s: _mk_write(r, s, True),
        lambda r, s: _mk_write(r, s, False),
        _mk_commit,
        _mk_dir,
        _dir_files(_mk_dir),
        marker="COMMITTED",
    ),
]
