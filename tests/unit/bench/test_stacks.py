"""Reading py-spy's raw stacks of two trees' hops side by side (``python -m bench.stacks``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.stacks import Profile, main

OURS = """\
thread (1): MainThread;run (tierd/daemon/runtime.py:10);copy (tierd/copy.py:5) 6
thread (2): tierd-io_0;_worker (concurrent/futures/thread.py:83);stage (tierd/copy.py:40) 4
thread (3): Thread-1 2
"""
THEIRS = """\
thread (1): MainThread;run (tierd/daemon/runtime.py:12);copy (tierd/copy.py:7) 3
"""


def test_samples_add_up_per_function_line_numbers_dropped(tmp_path: Path) -> None:
    (tmp_path / "a.stacks").write_text(OURS)
    profile = Profile.read([tmp_path / "a.stacks", tmp_path / "a.stacks"])
    assert (profile.runs, profile.samples) == (2, 24)
    assert profile.own["copy (tierd/copy.py)"] == 12
    assert profile.own["(no Python frame)"] == 4
    assert profile.under["run (tierd/daemon/runtime.py)"] == 12
    assert profile.per_run(profile.under, "stage (tierd/copy.py)") == 4


def test_two_trees_side_by_side_what_grew_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.stacks").write_text(OURS)
    (tmp_path / "b.stacks").write_text(THEIRS)
    assert main([str(tmp_path / "a.stacks"), "--against", str(tmp_path / "b.stacks"), "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "samples per run: 12 vs 3"
    assert out[1] == "--- own samples (per run: these, --against, difference)"
    assert out[2].split() == ["4.0", "0.0", "+4.0", "stage", "(tierd/copy.py)"]
    assert out[3].split() == ["6.0", "3.0", "+3.0", "copy", "(tierd/copy.py)"]
