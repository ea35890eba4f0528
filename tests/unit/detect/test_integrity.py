"""Structural completeness checks and the pickle reader that never runs code."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import torch

from tests.unit.detect.layouts import truncate, write_safetensors, write_torch
from tierd.daemon.detect.integrity import (
    Stub,
    safetensors_complete,
    stub_load,
    torch_pickle,
    weights_complete,
    zip_complete,
)


def test_torch_save_zip_is_complete_only_when_whole(tmp_path: Path) -> None:
    path = write_torch(tmp_path / "m.pt", {"w": torch.randn(1000), "n": 3})
    assert zip_complete(path, tmp_path) is True
    data = path.read_bytes()
    for cut in (1, 2, 21, 22, 23, 42, 100, len(data) // 2, len(data) - 64):
        short = tmp_path / f"cut{cut}.pt"
        short.write_bytes(data[:-cut])
        assert zip_complete(short, tmp_path) is False, f"cut {cut} bytes short was taken as complete"


def test_legacy_torch_save_is_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(4)}, path, _use_new_zipfile_serialization=False)
    assert zip_complete(path, tmp_path) is None
    assert weights_complete(path, tmp_path) is True  # settle time decides for these


def test_safetensors_length_must_match_header(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "model.safetensors")
    assert safetensors_complete(path, tmp_path)
    truncate(path, 0.9)
    assert not safetensors_complete(path, tmp_path)
    assert not weights_complete(path, tmp_path)


def test_torch_pickle_reads_structure_with_tensors_as_stubs(tmp_path: Path) -> None:
    path = write_torch(tmp_path / "s.pt", {"dp_world_size": 4, "module": {"w": torch.ones(2)}})
    state = torch_pickle(path, tmp_path)
    assert state["dp_world_size"] == 4
    assert isinstance(state["module"]["w"], Stub)


class _Evil:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, ...]:
        return (os.mkdir, (str(self.target),))


def test_stub_unpickler_never_calls_what_a_pickle_names(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    data = pickle.dumps({"x": _Evil(target)})
    loaded = stub_load(data)
    assert not target.exists()
    assert isinstance(loaded["x"], Stub)
    assert loaded["x"].module == "posix" or loaded["x"].module == "os"
