"""Hugging Face ``transformers.Trainer`` (``Trainer._save_checkpoint``).

What it does: ``save_model`` (weights, config, ``training_args.bin``), then optimizer and
scheduler (a DeepSpeed engine saves ``global_stepN/`` + ``latest`` here; FSDP saves DCP
directories), then every process writes its ``rng_state[_{i}].pth``, then process 0
writes ``trainer_state.json`` (plain ``open('w')``, not atomic), then rotates old
checkpoints. Versions 4.36-4.37 wrote into ``tmp-checkpoint-N`` and renamed it at the end.

Complete when: ``trainer_state.json`` parses, every weights file (zip / safetensors) is
written to its end, the per-process RNG files are 0..k with no gap, a nested DeepSpeed
tag named by ``latest`` is complete and nested DCP directories are. ``tmp-checkpoint-*``
is claimed and never recorded.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import Candidate, Entry, FileStat, Listing, Settings, Verdict, incomplete
from tierd.daemon.detect.formats.dcp import dcp_check, looks_like_dcp
from tierd.daemon.detect.formats.deepspeed import deepspeed_problem, read_tag
from tierd.daemon.detect.integrity import first_unwritten
from tierd.daemon.detect.tree import list_dir, read_file, walk_files
from tierd.daemon.markers import LATEST, TRAINER_STATE

__all__ = ["HfDetector", "trainer_metrics"]

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_TMP_CHECKPOINT = re.compile(r"^tmp-checkpoint-\d+$")
_RNG = re.compile(r"^rng_state_(\d+)\.pth$")


def _state_ok(files: list[FileStat], directory_name: str, root: Root) -> str | None:
    state = next(
        (f for f in files if f.path.name == TRAINER_STATE and f.path.parent.name == directory_name), None
    )
    if state is None:
        return f"{TRAINER_STATE} not written yet"
    try:
        data = json.loads(read_file(state.path, root))
    except (OSError, ValueError):
        return f"{TRAINER_STATE} is not complete JSON yet"
    if not isinstance(data, dict) or "global_step" not in data:
        return f"{TRAINER_STATE} has no global_step"
    return None


def trainer_metrics(path: Path, root: Root) -> dict[str, float]:
    """The numbers the Trainer logged at its checkpoint's step (``eval_loss``, ``loss``, ...).

    Read from ``log_history``: every entry whose ``step`` is the state's ``global_step``,
    later entries winning; ``step`` and ``epoch`` are positions, not metrics. Empty when the
    file cannot be read (completeness is decided elsewhere).
    """
    try:
        data = json.loads(read_file(path, root))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("log_history"), list):
        return {}
    step = data.get("global_step")
    metrics: dict[str, float] = {}
    for entry in data["log_history"]:
        if isinstance(entry, dict) and entry.get("step") == step:
            metrics.update(_numbers(entry))
    return metrics


def _numbers(entry: dict[str, object]) -> dict[str, float]:
    return {
        key: float(value)
        for key, value in entry.items()
        if key not in ("step", "epoch")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


def _rng_problem(files: list[FileStat]) -> str | None:
    """Which processes' RNG states are missing below the highest one present (the first 20)."""
    ranks = {int(m.group(1)) for f in files if (m := _RNG.match(f.path.name))}
    if not ranks or len(ranks) == max(ranks) + 1:
        return None
    # A name such as rng_state_99999999999.pth is the job's to choose: never build its range.
    missing = itertools.islice((r for r in range(max(ranks)) if r not in ranks), 20)
    return f"RNG states of {max(ranks) + 1 - len(ranks)} processes missing: {list(missing)}"


class HfDetector:
    """``checkpoint-N/`` directories written by the Trainer."""

    name = "hf"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim ``checkpoint-N`` (a candidate) and ``tmp-checkpoint-N`` (never complete)."""
        if not entry.is_dir:
            return None
        if _TMP_CHECKPOINT.match(entry.name):
            return []
        m = _CHECKPOINT.match(entry.name)
        if m is None:
            return None
        path = parent.path / entry.name
        return [Candidate(self.name, path, int(m.group(1)), str(path), root=parent.root)]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete once ``trainer_state.json`` is written and every nested part is."""
        root = candidate.root
        if not list_dir(candidate.path, root).has_file(TRAINER_STATE):
            return incomplete(f"{TRAINER_STATE} not written yet")
        files = walk_files(candidate.path, root)
        problem = (
            _state_ok(files, candidate.path.name, root) or first_unwritten(files, root) or _rng_problem(files)
        )
        retry_after = None
        if problem is None:
            problem, retry_after = self._nested_problem(candidate, files)
        if problem is not None:
            return incomplete(problem, retry_after)
        metrics = trainer_metrics(candidate.path / TRAINER_STATE, root)
        return Verdict(True, f"{TRAINER_STATE} written", tuple(files), metrics=metrics)

    def _nested_problem(self, candidate: Candidate, files: list[FileStat]) -> tuple[str | None, float | None]:
        """Why a nested DeepSpeed or DCP checkpoint is not complete, and when to look again."""
        root = candidate.root
        listing = list_dir(candidate.path, root)
        if listing.has_file(LATEST):
            tag = read_tag(candidate.path / LATEST, root)
            if tag is None or not listing.has_dir(tag):
                return f"DeepSpeed tag {tag!r} named by latest is not there", None
            tag_dir = candidate.path / tag
            inner = [f for f in files if f.path.is_relative_to(tag_dir)]
            if (problem := deepspeed_problem(tag_dir, root, inner)) is not None:
                return problem, None
        for name, entry in listing.entries.items():
            sub = candidate.path / name
            if not (entry.is_dir and looks_like_dcp(list_dir(sub, root))):
                continue
            check = dcp_check(sub, root, [f for f in files if f.path.parent == sub])
            if check.problem is not None:
                return f"{name}: {check.problem}", check.retry_after
        return None, None
