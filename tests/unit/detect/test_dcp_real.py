"""A real DCP checkpoint saved by a 2-process gloo group, checked by the DCP detector."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.net import free_port
from tests.fixtures.ranks import run_ranks, save_shared
from tests.unit.detect.helpers import complete, make_spec
from tests.unit.detect.layouts import truncate


@pytest.fixture(scope="module")
def two_rank_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dcp2")
    directory = root / "job" / "step_200"
    run_ranks(save_shared, (2, free_port(), str(directory)), 2)
    return directory


# Its tests share one two-rank save (the module fixture): on one xdist worker, made once.
pytestmark = pytest.mark.xdist_group("dcp_real")


def test_two_rank_save_has_a_shard_per_rank(two_rank_checkpoint: Path) -> None:
    names = sorted(p.name for p in two_rank_checkpoint.iterdir())
    assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"]


def test_two_rank_checkpoint_is_complete_with_every_shard(two_rank_checkpoint: Path, tmp_path: Path) -> None:
    root = tmp_path / "job"
    copy = root / "step_200"
    copy.mkdir(parents=True)
    for p in two_rank_checkpoint.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    spec = make_spec(root, tmp_path)
    (hit,) = complete(spec)
    assert (hit.detector.name, hit.step) == ("dcp", 200)
    assert sorted(f.path.name for f in hit.verdict.files) == [".metadata", "__0_0.distcp", "__1_0.distcp"]

    rank1 = copy / "__1_0.distcp"
    data = rank1.read_bytes()
    truncate(rank1)
    assert complete(spec) == [], "rank 1's shard cut short was accepted"
    rank1.unlink()
    assert complete(spec) == [], "a checkpoint missing rank 1's shard was accepted"
    rank1.write_bytes(data)
    os.utime(rank1, ns=(0, (copy / ".metadata").stat().st_mtime_ns))
    assert len(complete(spec)) == 1
