"""DeepSpeed (``DeepSpeedEngine.save_checkpoint``) and its universal checkpoints.

What deepspeed/runtime/engine.py does: every rank ``torch.save``s its files into
``<save_dir>/<tag>/`` (default tag ``global_step{N}``): ``mp_rank_{MM}_model_states.pt``
per model-parallel rank and ``[bf16_]zero_pp_rank_{D}_mp_rank_{MM}_optim_states.pt`` per
data-parallel rank. Then global rank 0 writes the tag into ``<save_dir>/latest`` with a
plain ``open('w')`` (not atomic, not fsynced) and only *then* a barrier follows: other
ranks may still be writing their shards when ``latest`` changes. ds_to_universal.py
writes ``latest_universal`` the same way, naming ``<tag>_universal``.

Complete when: ``latest`` (``latest_universal``) names the tag, or the tag is an older
``global_stepN`` than the one it names (a run passes every step it resumes over again);
every ``.pt`` is a complete zip; and the ZeRO shards form the full 0..dp-1 range for
every model-parallel rank (dp read from ``dp_world_size`` inside the model states).
``latest`` is shared by every step and so never part of a step's files.

On node-local tier 0 the node holding ``latest`` (global rank 0's) holds only its own ranks'
shards. Its files name the rest by rank: the world sizes in its model states give every
``mp_rank_{MM}_model_states.pt`` and ``{prefix}zero_pp_rank_{D}_mp_rank_{MM}_optim_states.pt``,
which becomes the step's expected set. Layouts with other files (pipeline layers, MoE
experts, ZeRO-3's per-rank model states) are not named: they rely on ``nodes: N``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import (
    Candidate,
    Entry,
    FileStat,
    Listing,
    Settings,
    Verdict,
    incomplete,
    trailing_int,
)
from tierd.daemon.detect.integrity import first_unwritten, torch_pickle
from tierd.daemon.detect.tree import read_file, walk_files
from tierd.daemon.markers import LATEST, LATEST_UNIVERSAL
from tierd.limits import MAX_EXPECTED_FILES, MAX_WORLD_SIZE

__all__ = ["DeepSpeedDetector", "deepspeed_expected", "deepspeed_problem", "read_tag"]

TAG_LIMIT = 4096  # a ``latest`` file holds one tag
_GLOBAL_STEP = re.compile(r"^global_step(\d+)(_universal)?$")
_ZERO = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
_MODEL = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")


def read_tag(path: Path, root: Root) -> str | None:
    """The tag a ``latest`` file names; None while it is missing or empty (being written)."""
    try:
        text = read_file(path, root, TAG_LIMIT).decode(errors="replace").strip()
    except OSError:
        return None
    return text or None


def _world_sizes(model_states: Path, root: Root) -> tuple[int | None, int | None]:
    """(dp_world_size, mp_world_size) recorded in a model-states file, where readable."""
    try:
        state = torch_pickle(model_states, root)
    except ValueError:
        return None, None
    if not isinstance(state, dict):
        return None, None
    return _world_size(state.get("dp_world_size")), _world_size(state.get("mp_world_size"))


def _world_size(value: object) -> int | None:
    """``value`` when it is a world size tierd accepts (1 to ``MAX_WORLD_SIZE``), else None.

    The file is the job's: a size of 2**31 must not become a list of 2**31 ranks.
    """
    return value if isinstance(value, int) and 1 <= value <= MAX_WORLD_SIZE else None


def _shard_problem(directory: Path, root: Root, files: list[FileStat]) -> str | None:
    names = [f.path.name for f in files if f.path.parent == directory]
    zero: dict[int, set[int]] = defaultdict(set)
    for name in names:
        if m := _ZERO.match(name):
            zero[int(m.group(2))].add(int(m.group(1)))
    models = sorted(int(m.group(1)) for n in names if (m := _MODEL.match(n)))
    dp, mp = (None, None)
    if models:
        dp, mp = _world_sizes(directory / f"mp_rank_{models[0]:02d}_model_states.pt", root)
    if mp is not None and models and (len(models) != mp or models != list(range(mp))):
        return f"model states for {mp} model-parallel ranks expected, found {models}"
    if not zero:
        return None
    widths = {len(ranks) for ranks in zero.values()}
    want = dp if dp is not None else max(widths)
    for mp_rank, ranks in sorted(zero.items()):
        if len(ranks) != want or ranks != set(range(want)):
            return f"ZeRO shards of mp rank {mp_rank}: {len(ranks)} of {want} written"
    return None


def deepspeed_problem(
    directory: Path, root: Root, files: list[FileStat], universal: bool = False
) -> str | None:
    """Why the files of a DeepSpeed tag directory (below ``root``) are not all written, or None."""
    unwritten = first_unwritten((f for f in files if f.path.suffix == ".pt"), root)
    if unwritten is not None:
        return unwritten
    return None if universal else _shard_problem(directory, root, files)


def deepspeed_expected(directory: Path, root: Root, files: list[FileStat]) -> tuple[str, ...] | None:
    """Every file of the step, named by rank from this node's model states; None where it cannot tell.

    Only when every file here is a model-states or ZeRO optimizer file the world sizes name:
    a file they do not name means a layout whose other files cannot be predicted.
    """
    names = {f.path.name for f in files}
    if len(names) != len(files) or any(f.path.parent != directory for f in files):
        return None  # subdirectories: not the layout named here
    models = sorted(n for n in names if _MODEL.match(n))
    prefixes = {n[: n.index("zero_pp_rank_")] for n in names if _ZERO.match(n)}
    if not models or len(prefixes) > 1:
        return None
    dp, mp = _world_sizes(directory / models[0], root)
    if dp is None or mp is None or dp < 1 or mp < 1 or dp * mp > MAX_EXPECTED_FILES:
        return None
    want = {f"mp_rank_{m:02d}_model_states.pt" for m in range(mp)}
    for prefix in prefixes:  # this node's ranks have ZeRO shards: so do every dp rank's
        want |= {
            f"{prefix}zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt" for d in range(dp) for m in range(mp)
        }
    return tuple(sorted(want)) if names <= want else None


def _step_of(tag: str) -> int | None:
    m = _GLOBAL_STEP.match(tag)
    return int(m.group(1)) if m else trailing_int(tag)


class DeepSpeedDetector:
    """``global_step{N}/`` directories (or any tag) beside a ``latest`` file."""

    name = "deepspeed"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim ``global_stepN[_universal]`` directories and the tags ``latest*`` name."""
        if not entry.is_dir:
            return None
        m = _GLOBAL_STEP.match(entry.name)
        universal = bool(m and m.group(2))
        if m is None:
            trackers = [f for f in (LATEST, LATEST_UNIVERSAL) if parent.has_file(f)]
            named = {read_tag(parent.path / f, parent.root) for f in trackers}
            if entry.name not in named:
                return None
            universal = read_tag(parent.path / LATEST_UNIVERSAL, parent.root) == entry.name
        path = parent.path / entry.name
        extra = {"universal": universal}
        return [Candidate(self.name, path, _step_of(entry.name), str(path), extra, root=parent.root)]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete once ``latest`` has moved to (or past) this tag and every shard is written."""
        universal = bool(candidate.extra.get("universal"))
        tracker = candidate.path.parent / (LATEST_UNIVERSAL if universal else LATEST)
        root = candidate.root
        tag = read_tag(tracker, root)
        name = candidate.path.name
        if tag is None:
            return incomplete(f"{tracker.name} does not name a tag yet")
        if tag != name and not _older(name, tag):
            return incomplete(f"{tracker.name} names {tag}, not {name}")
        files = walk_files(candidate.path, root)
        unwritten = first_unwritten((f for f in files if f.path.suffix == ".pt"), root)
        if unwritten is not None:
            return Verdict(False, unwritten, marker=True)
        problem = None if universal else _shard_problem(candidate.path, root, files)
        if problem is not None:  # on a node-local tier 0, other nodes hold the other ranks' shards
            expected = deepspeed_expected(candidate.path, root, files)
            return Verdict(False, problem, marker=True, expected=expected)
        return Verdict(True, f"{tracker.name} names {tag}", tuple(files))


def _older(name: str, tag: str) -> bool:
    mine, latest = _GLOBAL_STEP.match(name), _GLOBAL_STEP.match(tag)
    return bool(mine and latest and int(mine.group(1)) < int(latest.group(1)))
