"""The trees a benchmark measures: each one's environment, and its own tierd writing its catalog."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bench import hop
from bench.datasets import Dataset
from bench.harness import Settings
from bench.hop import Profile
from bench.sides import AGAINST_VARIABLE, Side, against_from_env, this_tree
from tierd.daemon.detect.hashing import HashedFile

TIERS = [
    {"name": "nvme", "kind": "posix", "path": "/tmp/nvme"},
    {"name": "s3", "kind": "posix", "path": "/tmp/s3"},
]


def _dataset(tmp_path: Path) -> Dataset:
    files = (
        HashedFile("job/step_1/a.bin", 10, 1, "AAAAAAAAAAA=", 0, 0, 0o644),
        HashedFile("job/step_1/.metadata", 4, 2, "AAAAAAAAAAE=", 0, 0, 0o600),
    )
    return Dataset("small", tmp_path, files, "two files")


def _replicas(catalog: Path) -> dict[str, str]:
    with sqlite3.connect(catalog) as conn:
        return dict(conn.execute("SELECT tier, state FROM replicas").fetchall())


def test_a_side_runs_its_own_tree_without_tierd_overrides() -> None:
    side = Side("against", Path("/somewhere/else"), "abc1234")
    env = side.env({"TIERD_BENCH_ROUNDS": "3", "TIERD_NODE": "x", "PATH": "/bin", "PYTHONPATH": "/mine"})
    assert env == {"PATH": "/bin", "PYTHONPATH": "/somewhere/else"}


def test_against_names_a_tree_holding_tierd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(AGAINST_VARIABLE, raising=False)
    assert against_from_env() is None
    monkeypatch.setenv(AGAINST_VARIABLE, str(tmp_path))
    with pytest.raises(ValueError, match="no tierd package there"):
        against_from_env()
    monkeypatch.setenv(AGAINST_VARIABLE, str(this_tree().root))
    side = against_from_env()
    assert side is not None
    assert (side.name, side.root, side.source) == ("against", this_tree().root, this_tree().source)


def test_a_tree_records_the_checkpoint_in_a_catalog_of_its_own_schema(tmp_path: Path) -> None:
    """Recorded by ``bench/record_catalog.py`` in a child process, as that tree's detection records it."""
    catalog = tmp_path / "catalog.db"
    config = {"node": "bench", "tiers": TIERS}
    spec = {
        **_dataset(tmp_path).record_spec(),
        "only_on": {"tier": "s3", "location": "/tmp/s3/x", "deleted": ["nvme"]},
    }
    checkpoint_id = this_tree().record(catalog, config, spec)
    assert _replicas(catalog) == {"nvme": "deleted", "s3": "verified"}
    with sqlite3.connect(catalog) as conn:
        files = conn.execute(
            "SELECT relpath, size, checksum FROM files WHERE checkpoint_id = ?", (checkpoint_id,)
        )
        assert sorted(files) == [
            ("job/step_1/.metadata", 4, "AAAAAAAAAAE="),
            ("job/step_1/a.bin", 10, "AAAAAAAAAAA="),
        ]
    assert hop._state(catalog, checkpoint_id, "s3") == ("verified", None)


def test_a_failed_record_names_the_tree_and_says_why(tmp_path: Path) -> None:
    spec = {**_dataset(tmp_path).record_spec(), "only_on": {"tier": "nowhere", "location": "x"}}
    with pytest.raises(RuntimeError, match=re.escape(f"with {this_tree().source} failed")) as failed:
        this_tree().record(tmp_path / "catalog.db", {"node": "bench", "tiers": TIERS}, spec)
    assert "AssertionError: nowhere" in str(failed.value)


def test_each_tree_records_once_then_its_catalog_is_copied(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[Path] = []

    def record(self: Side, catalog: Path, config: dict[str, Any], spec: dict[str, Any]) -> int:
        calls.append(catalog)
        catalog.write_bytes(b"catalog of " + self.name.encode())
        return 7

    monkeypatch.setattr(Side, "record", record)
    dataset, config = _dataset(tmp_path), {"tiers": TIERS}
    other = Side("against", tmp_path / "other", "abc")
    for run, side in enumerate([this_tree(), other, this_tree(), other]):
        target = tmp_path / f"run-{run}.db"
        assert hop._recorded(side, dataset, config, target, tmp_path / "templates") == 7
        assert target.read_bytes() == b"catalog of " + side.name.encode()
    assert len(calls) == 2
    # Another checkpoint in the same directory (bench_copy's small one after its big one): recorded anew.
    other_files = Dataset("big", tmp_path, dataset.files[:1], "one file")
    hop._recorded(this_tree(), other_files, config, tmp_path / "run-4.db", tmp_path / "templates")
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("profiler", "suffix"),
    [("cprofile", ".prof"), ("py-spy", ".stacks"), ("py-spy-gil", ".stacks"), ("strace", ".strace")],
)
def test_a_profile_goes_where_asked_under_the_run_label(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, profiler: str, suffix: str
) -> None:
    monkeypatch.setenv("TIERD_BENCH_PROFILE_DIR", str(tmp_path / "profiles"))
    monkeypatch.setenv("TIERD_BENCH_PROFILER", profiler)
    settings = Settings.from_env(3)
    assert settings.profile("against-small-0") == Profile(
        tmp_path / "profiles" / f"against-small-0{suffix}", profiler
    )
    assert (tmp_path / "profiles").is_dir()


def test_an_unknown_profiler_is_refused_naming_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERD_BENCH_PROFILER", "perf")
    with pytest.raises(
        ValueError, match="TIERD_BENCH_PROFILER must be one of cprofile, py-spy, py-spy-gil, strace"
    ):
        Settings.from_env(3)
