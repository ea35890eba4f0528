"""``python -m bench``'s command line: which benchmarks run, how many rounds, against what."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench.sides import AGAINST_VARIABLE, resolve, scratch_worktree


def test_names_select_benchmarks_and_none_selects_all() -> None:
    assert cli.parse(["copy", "s3"]).names == ["copy", "s3"]
    assert cli.parse([]).names == cli.available()
    assert {"copy", "restore", "s3", "fleet"} <= set(cli.available())


def test_an_unknown_name_is_refused_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse(["copi"])
    assert exited.value.code == 2
    assert "unknown benchmark(s) ['copi']; available: [" in capsys.readouterr().err


def test_rounds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.parse(["--rounds", "3", "copy"]).rounds == 3
    with pytest.raises(SystemExit):
        cli.parse(["--rounds", "0", "copy"])
    assert "--rounds: must be 1 or more, not 0" in capsys.readouterr().err


def test_rounds_set_every_rounds_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in cli.ROUND_VARIABLES:
        monkeypatch.setenv(variable, "")  # restored (unset) after the test
    ran: list[list[str]] = []
    monkeypatch.setattr(cli, "_run", ran.append)
    assert cli.main(["--rounds", "2", "copy"]) == 0
    assert ran == [["copy"]]
    assert {os.environ[v] for v in cli.ROUND_VARIABLES} == {"2"}
    assert "TIERD_BENCH_COPY_SMALL_ROUNDS" in cli.ROUND_VARIABLES


def test_against_takes_the_benchmarks_that_can_run_another_tree(capsys: pytest.CaptureFixture[str]) -> None:
    comparable = cli.comparable()
    assert {"copy", "restore", "s3"} <= set(comparable)
    assert "retention" not in comparable  # in-process: nothing of another tree to run
    args = cli.parse(["--against", "HEAD"])
    assert args.names == comparable
    assert args.commit == resolve("HEAD")
    with pytest.raises(SystemExit):
        cli.parse(["--against", "HEAD", "copy", "retention"])
    assert "--against runs only" in capsys.readouterr().err


def test_against_a_name_that_is_no_commit_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse(["--against", "no-such-rev-25", "copy"])
    assert exited.value.code == 2
    assert "--against no-such-rev-25: not a commit of" in capsys.readouterr().err


def test_against_runs_with_the_scratch_tree_named_and_removes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The benchmarks see the worktree in $TIERD_BENCH_AGAINST; it is gone afterwards."""
    seen: list[str] = []
    monkeypatch.setattr(cli, "scratch_worktree", functools.partial(scratch_worktree, parent=tmp_path))

    def run(names: list[str]) -> None:
        path = os.environ[AGAINST_VARIABLE]
        top = subprocess.run(
            ["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        )
        assert top.stdout.strip() == resolve("HEAD")
        assert path.startswith(str(tmp_path))
        seen.append(path)

    monkeypatch.setattr(cli, "_run", run)
    monkeypatch.setenv(AGAINST_VARIABLE, "")  # restored (unset) after the test
    assert cli.main(["--against", "HEAD", "copy"]) == 0
    assert len(seen) == 1
    assert not os.path.exists(seen[0])


def test_two_runs_against_one_commit_keep_their_own_trees(tmp_path: Path) -> None:
    """A run that ends removes its tree only, never the one a concurrent run still uses."""
    with scratch_worktree("HEAD", parent=tmp_path) as first:
        with scratch_worktree("HEAD", parent=tmp_path) as second:
            assert first != second
        assert not second.exists()
        assert (first / "pyproject.toml").exists()
    assert not first.exists()
