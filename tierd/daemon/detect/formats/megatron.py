"""Megatron-LM (``megatron/training/checkpointing.py``).

What it does: every rank saves into ``<save>/iter_{N:07d}/`` (legacy: one
``mp_rank_{TT}[_{PPP}][_{EEE}]/model_optim_rng.pt`` per model-parallel rank, plus
``distrib_optim.pt``; ``torch_dist``: a DCP directory with ``.metadata``, ``common.pt``
and ``metadata.json``), then a barrier (or, for async saves, a finalize step after
every rank is done), then rank 0 writes ``latest_checkpointed_iteration.txt`` with a
plain ``open('w')``: the iteration number, or ``release`` for ``<save>/release/``.

Complete when: the tracker holds an iteration >= N (or ``release`` for the release
directory); every ``.pt`` is a complete zip; a ``torch_dist`` directory also passes the
DCP check. The tracker is shared by every step and never part of a step's files.

On node-local tier 0 the tracker's node (global rank 0's) holds only its own ranks'
directories. A legacy checkpoint names the rest by rank: ``args`` in its
``model_optim_rng.pt`` gives the tensor, pipeline and expert parallel sizes, hence every
``mp_rank_{TT}[_{PPP}][_{EEE}]/`` with the files this node's directories hold, which becomes
the step's expected set. (``torch_dist`` is DCP: its ``.metadata`` names every file.)
"""

from __future__ import annotations

import re
from pathlib import Path

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import Candidate, Entry, FileStat, Listing, Settings, Verdict, incomplete
from tierd.daemon.detect.formats.dcp import dcp_check, looks_like_dcp
from tierd.daemon.detect.integrity import Stub, first_unwritten, torch_pickle
from tierd.daemon.detect.tree import list_dir, read_file, walk_files
from tierd.daemon.markers import TRACKER
from tierd.limits import MAX_EXPECTED_FILES

__all__ = ["MegatronDetector", "megatron_expected", "read_tracker"]

RELEASE = "release"
_ITER = re.compile(r"^iter_(\d{7,})$")
_RANK_DIR = re.compile(r"^mp_rank_\d{2}(?:_\d{3}){0,2}$")
MODEL = "model_optim_rng.pt"
RANK_FILES = frozenset({MODEL, "distrib_optim.pt"})


def read_tracker(path: Path, root: Root) -> int | str | None:
    """The tracker's iteration, ``"release"``, or None while missing, empty or garbled."""
    try:
        text = read_file(path, root, 4096).decode(errors="replace").strip()
    except OSError:
        return None
    if text == RELEASE:
        return RELEASE
    return int(text) if text.isdigit() else None


class MegatronDetector:
    """``iter_NNNNNNN/`` (and ``release/``) beside ``latest_checkpointed_iteration.txt``."""

    name = "megatron"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim ``iter_NNNNNNN`` directories, and ``release`` when a tracker is beside it."""
        if not entry.is_dir:
            return None
        path = parent.path / entry.name
        if m := _ITER.match(entry.name):
            return [Candidate(self.name, path, int(m.group(1)), str(path), root=parent.root)]
        if entry.name == RELEASE and parent.has_file(TRACKER):
            return [Candidate(self.name, path, 0, str(path), {"release": True}, root=parent.root)]
        return None

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete once the tracker reaches this iteration and every file is written."""
        root = candidate.root
        tracked = read_tracker(candidate.path.parent / TRACKER, root)
        if tracked is None:
            return incomplete(f"{TRACKER} does not hold an iteration yet")
        if candidate.extra.get("release"):
            if tracked != RELEASE:
                return incomplete(f"{TRACKER} holds {tracked}, not release")
        elif isinstance(tracked, str) or candidate.step is None or tracked < candidate.step:
            return incomplete(f"{TRACKER} holds {tracked}, before {candidate.step}")
        files = walk_files(candidate.path, root)
        unwritten = first_unwritten((f for f in files if f.path.suffix == ".pt"), root)
        if unwritten is not None:
            return Verdict(False, unwritten, marker=True)
        if looks_like_dcp(list_dir(candidate.path, root)):  # torch_dist
            problem, expected, retry_after = dcp_check(candidate.path, root, files)
        else:
            (problem, expected), retry_after = _legacy_check(candidate.path, root, files), None
        if problem is not None:  # on a node-local tier 0, other nodes hold the other ranks' files
            return Verdict(False, problem, retry_after=retry_after, marker=True, expected=expected)
        return Verdict(True, f"{TRACKER} holds {tracked}", tuple(files))


def _legacy_check(
    directory: Path, root: Root, files: list[FileStat]
) -> tuple[str | None, tuple[str, ...] | None]:
    """(why the legacy step is not complete or None, every file its parallel sizes name, if known)."""
    listing = list_dir(directory, root)
    for name, entry in listing.entries.items():
        if not (entry.is_dir and name.startswith("mp_rank_")):
            continue
        if not list_dir(directory / name, root).has_file(MODEL):
            return f"{name}/{MODEL} is missing", None
    expected = megatron_expected(directory, root)
    held = {str(f.path.relative_to(directory)) for f in files}
    absent = [name for name in expected or () if name not in held]
    if absent:
        return f"{absent[0]} (named by the parallel sizes) is missing", expected
    return None, expected


def megatron_expected(directory: Path, root: Root) -> tuple[str, ...] | None:
    """Every file of a legacy step, named by rank from this node's ``args``; None where it cannot tell.

    Only when this node holds nothing but rank directories of the same files (``model_optim_rng.pt``,
    and ``distrib_optim.pt`` with the distributed optimizer) that the parallel sizes name.
    """
    held: dict[str, frozenset[str]] = {}
    for name, entry in list_dir(directory, root).entries.items():
        if not entry.is_dir or not _RANK_DIR.match(name):
            return None
        held[name] = frozenset(list_dir(directory / name, root).entries)
    kinds = set(held.values())
    if len(kinds) != 1 or not (kind := kinds.pop()) <= RANK_FILES or MODEL not in kind:
        return None
    sizes = _parallel_sizes(directory / min(held) / MODEL, root)
    if sizes is None:
        return None
    dirs = _rank_dirs(*sizes)
    if not set(held) <= dirs:
        return None
    return tuple(sorted(f"{d}/{f}" for d in dirs for f in kind))


def _parallel_sizes(model: Path, root: Root) -> tuple[int, int, int] | None:
    """(tensor, pipeline, expert) parallel sizes from the checkpoint's ``args``, where recorded."""
    try:
        state = torch_pickle(model, root)
    except ValueError:
        return None
    args = state.get("args") if isinstance(state, dict) else None
    if not isinstance(args, Stub):
        return None
    tp, pp = args.field("tensor_model_parallel_size"), args.field("pipeline_model_parallel_size")
    ep = args.field("expert_model_parallel_size") or 1  # older Megatron: no expert parallelism
    for size in (tp, pp, ep):
        if not isinstance(size, int) or size < 1:
            return None
    if tp * pp * ep > MAX_EXPECTED_FILES:  # the job's file: 2**31 ranks must not become 2**31 names
        return None
    return tp, pp, ep


def _rank_dirs(tp: int, pp: int, ep: int) -> set[str]:
    """Megatron's ``get_checkpoint_name`` directories: pipeline and expert ranks only when > 1."""
    dirs = set()
    for t in range(tp):
        for p in range(pp):
            for e in range(ep):
                name = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") + (f"_{e:03d}" if ep > 1 else "")
                dirs.add(name)
    return dirs
