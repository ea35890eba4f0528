"""nvidia-resiliency-ext local checkpoints (``LocalCheckpointManager``).

What checkpointing/local/ckpt_managers/local_manager.py does: each rank writes
``<root>/<session_id>/<rank>/iter_{N:07d}_{rank}_local.dirty.pt`` (opened with ``"bx"``),
``torch.save``s into it and renames it to ``iter_{N:07d}_{rank}_local.pt``; replication
adds other ranks' files to a rank's directory. There is no global marker: the manager
treats iteration N as complete when every rank has its file (an all-gather), removes
older iterations after a success and the iteration's files after a failure.

Complete (on this node) when: no ``*_local.dirty.pt`` of iteration N is left, every rank
directory that holds local checkpoints has its own ``iter_N_<rank>_local.pt``, and every
file is a complete zip. The candidate's path is the session directory (watch its parent).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import Candidate, Entry, FileStat, Listing, Settings, Verdict, incomplete
from tierd.daemon.detect.integrity import first_unwritten
from tierd.daemon.detect.tree import list_dir, stat_files

__all__ = ["LOCAL_FILE", "NvrxDetector"]

LOCAL_FILE = re.compile(r"^iter_(\d{7,})_(\d+)_local(\.dirty)?\.pt$")


def _rank_files(session: Path, root: Root) -> dict[int, list[tuple[str, int, bool]]]:
    """Rank directory -> (file name, iteration, dirty) of every local checkpoint file in it."""
    found: dict[int, list[tuple[str, int, bool]]] = defaultdict(list)
    for name, entry in list_dir(session, root).entries.items():
        if not (entry.is_dir and name.isdigit()):
            continue
        for fname in list_dir(session / name, root).entries:
            if m := LOCAL_FILE.match(fname):
                found[int(name)].append((fname, int(m.group(1)), bool(m.group(3))))
    return found


class NvrxDetector:
    """A session directory of rank directories holding ``iter_*_local.pt`` files."""

    name = "nvrx_local"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim a session directory; one candidate per iteration found in it."""
        if not entry.is_dir:
            return None
        session = parent.path / entry.name
        ranks = _rank_files(session, parent.root)
        if not ranks:
            return None
        iterations = sorted({it for files in ranks.values() for _, it, _ in files})
        root = parent.root
        return [Candidate(self.name, session, it, f"{session}#iter={it}", root=root) for it in iterations]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete once every rank's file of the iteration is renamed from ``.dirty``."""
        step, root = candidate.step, candidate.root
        paths: list[Path] = []
        for rank, entries in sorted(_rank_files(candidate.path, root).items()):
            mine = [(n, dirty) for n, it, dirty in entries if it == step]
            if any(dirty for _, dirty in mine):
                return incomplete(f"rank {rank} is still writing iteration {step}")
            own = f"iter_{step:07d}_{rank}_local.pt"
            if own not in {n for n, _ in mine}:
                return incomplete(f"rank {rank} has not saved iteration {step} yet")
            paths.extend(candidate.path / str(rank) / name for name, _ in mine)
        files: list[FileStat] = [st for st in stat_files(paths, root) if st is not None]
        problem = first_unwritten(files, root)
        if problem is not None:
            return incomplete(problem)
        return Verdict(
            True, "every rank renamed its .dirty file", tuple(sorted(files, key=lambda f: str(f.path)))
        )
