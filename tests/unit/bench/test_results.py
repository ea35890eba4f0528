"""What a comparison reports: the order contestants run in, each one's spread, CPU and peak, the ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.datasets import Dataset
from bench.harness import Settings, Timed
from bench.results import Cpu, Runs, Series, interleaved
from bench.sides import Side, this_tree
from tierd.daemon.detect.hashing import HashedFile


def test_every_contestant_runs_once_a_round_and_none_always_first() -> None:
    order = list(interleaved(["tierd", "against", "baseline"], 4))
    assert [name for _, name in order] == [
        *("tierd", "against", "baseline"),
        *("against", "baseline", "tierd"),
        *("baseline", "tierd", "against"),
        *("tierd", "against", "baseline"),
    ]
    assert [round_ for round_, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [name for _, name in interleaved(["tierd", "baseline"], 3)] == [
        *("tierd", "baseline"),
        *("baseline", "tierd"),
        *("tierd", "baseline"),
    ]


def test_a_series_reports_its_spread_and_median_cpu() -> None:
    series = Series()
    for seconds, cpu in [(2.0, Cpu(1.0, 0.5)), (1.0, Cpu(0.5, 0.25)), (4.0, Cpu(2.0, 1.0))]:
        series.add(seconds, cpu, 100)
    series.add(3.0, None, None)  # CPU not measured for that run
    assert series.fields("tierd") == {
        "tierd_runs": [2.0, 1.0, 4.0, 3.0],
        "tierd_spread": [1.0, 2.5, 4.0],
        "tierd_cpu_seconds": 1.5,
        "tierd_cpu_user_seconds": 1.0,
        "tierd_cpu_runs": [1.5, 0.75, 3.0],
    }
    assert series.peaks == [100, 100, 100]


def _dataset(tmp_path: Path) -> Dataset:
    files = (HashedFile("job/step_1/a", 2**30, 1, "x"), HashedFile("job/step_1/.metadata", 2**30, 2, "y"))
    return Dataset("small", tmp_path, files, "two files")


def _settings(against: Side | None) -> Settings:
    return Settings(2**30, 4, 5000, 2, "cold", None, against=against)


def test_a_result_against_another_tree_gives_both_sides_and_their_ratios(tmp_path: Path) -> None:
    other = Side("against", tmp_path, "d1b0371")
    runs = Runs(1.0, 150_000_000, other)
    assert runs.contestants == ["tierd", "against", "baseline"]
    for tierd, against, baseline in [(1.0, 2.0, 1.0), (3.0, 4.0, 1.0)]:
        runs.add_tierd(tierd, Cpu(tierd, 0.0), 120_000_000)
        runs.add_against(against, Cpu(against / 2, 0.0), 160_000_000)
        runs.add_baseline(Timed(baseline, Cpu(0.5, 0.0), 1))
    summary = runs.summary(_dataset(tmp_path), _settings(other), tmp_path)
    json.dumps(summary)  # a result line is JSON
    assert summary["tierd_spread"] == [1.0, 2.0, 3.0]
    assert summary["against_spread"] == [2.0, 3.0, 4.0]
    assert summary["baseline_spread"] == [1.0, 1.0, 1.0]
    assert summary["against_source"] == "d1b0371"
    assert summary["tierd_source"] == this_tree().source
    assert summary["ratio_to_against"] == pytest.approx(2.0 / 3.0, abs=1e-4)
    assert summary["cpu_ratio_to_against"] == pytest.approx(2.0 / 1.5, abs=1e-4)
    assert summary["against_ratio"] == 3.0
    assert summary["against_peak_rss_bytes"] == 160_000_000
    assert summary["rss_goal_met"] is True
    assert summary["time_goal_met"] is False  # tierd 2.0 s against the baseline's 1.0 s
    assert (
        summary["statistic"] == "median; tierd, against, baseline interleaved, the order rotated each round"
    )
    before, after = summary["loadavg_1_5_15m_before_after"]
    assert len(before) == len(after) == 3
    assert summary["other_processes_cpu_share"] >= 0.0


def test_a_result_of_this_tree_alone_has_no_against_fields(tmp_path: Path) -> None:
    runs = Runs(1.1, 200_000_000)
    assert runs.contestants == ["tierd", "baseline"]
    runs.add_tierd(1.0, None, 1)
    runs.add_baseline(Timed(2.0, Cpu(0.1, 0.1), 1))
    summary = runs.summary(_dataset(tmp_path), _settings(None), tmp_path)
    assert not [key for key in summary if key.startswith("against") or key.endswith("to_against")]
    assert summary["tierd_cpu_seconds"] is None
    assert summary["statistic"] == "single run"
    assert summary["time_goal_met"] is True
