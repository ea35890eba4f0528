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
"""

from __future__ import annotations

import re
from pathlib import Path

from tierd.daemon.detect.dcp import dcp_problem, looks_like_dcp
from tierd.daemon.detect.integrity import first_unwritten
from tierd.daemon.detect.layout import (
    Candidate,
    Entry,
    Listing,
    Settings,
    Verdict,
    incomplete,
    list_dir,
    read_file,
    walk_files,
)

__all__ = ["TRACKER", "MegatronDetector", "read_tracker"]

TRACKER = "latest_checkpointed_iteration.txt"
RELEASE = "release"
_ITER = re.compile(r"^iter_(\d{7,})$")


def read_tracker(path: Path) -> int | str | None:
    """The tracker's iteration, ``"release"``, or None while missing, empty or garbled."""
    try:
        text = read_file(path, 4096).decode(errors="replace").strip()
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
            return [Candidate(self.name, path, int(m.group(1)), str(path))]
        if entry.name == RELEASE and parent.has_file(TRACKER):
            return [Candidate(self.name, path, 0, str(path), {"release": True})]
        return None

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete once the tracker reaches this iteration and every file is written."""
        tracked = read_tracker(candidate.path.parent / TRACKER)
        if tracked is None:
            return incomplete(f"{TRACKER} does not hold an iteration yet")
        if candidate.extra.get("release"):
            if tracked != RELEASE:
                return incomplete(f"{TRACKER} holds {tracked}, not release")
        elif isinstance(tracked, str) or candidate.step is None or tracked < candidate.step:
            return incomplete(f"{TRACKER} holds {tracked}, before {candidate.step}")
        files = walk_files(candidate.path)
        problem = first_unwritten(f for f in files if f.path.suffix == ".pt")
        if problem is None and looks_like_dcp(list_dir(candidate.path)):
            problem = dcp_problem(candidate.path, files)
        if problem is None:
            problem = _legacy_problem(candidate.path)
        if problem is not None:  # on a node-local tier 0, other nodes hold the other ranks' files
            return Verdict(False, problem, marker=True)
        return Verdict(True, f"{TRACKER} holds {tracked}", tuple(files))


def _legacy_problem(directory: Path) -> str | None:
    listing = list_dir(directory)
    for name, entry in listing.entries.items():
        if (
            entry.is_dir
            and name.startswith("mp_rank_")
            and not list_dir(directory / name).has_file("model_optim_rng.pt")
        ):
            return f"{name}/model_optim_rng.pt is missing"
    return None
