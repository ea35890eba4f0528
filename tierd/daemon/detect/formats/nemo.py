"""NeMo (``NeMoModelCheckpoint`` / ``nemo.lightning`` ``ModelCheckpoint``) and Lightning.

What nemo/utils/callbacks/nemo_model_checkpoint.py does: before a save, global rank 0
touches ``<checkpoint path minus .nemo/.ckpt/-EMA>-unfinished`` and all ranks wait at a
barrier; then the checkpoint is written (a ``.ckpt`` file, or a distributed-checkpoint
*directory* of the same name without ``.ckpt``; an EMA copy as ``<name>-EMA.ckpt``);
after another barrier (or, for async saves, in the finalize callback) the marker is
removed. Removal of an old checkpoint sets the same marker first. Names follow
Lightning's ``ModelCheckpoint``: ``...-step=N-...[-last]``. Plain Lightning writes the same
names without a marker, via fsspec: a temporary file in ``/tmp`` moved into place, which
on another file system is a copy that grows under its final name.

Complete when: no ``-unfinished`` marker is beside it, every ``.ckpt`` is a complete zip,
and a distributed-checkpoint directory passes the DCP check.
"""

from __future__ import annotations

import re
from pathlib import Path

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import Candidate, Entry, FileStat, Listing, Settings, Verdict, incomplete
from tierd.daemon.detect.formats.dcp import dcp_check, looks_like_dcp
from tierd.daemon.detect.integrity import first_unwritten
from tierd.daemon.detect.tree import is_dir, list_dir, stat_file, walk_files

__all__ = ["UNFINISHED", "NemoDetector", "checkpoint_base"]

UNFINISHED = "-unfinished"
_STEP = re.compile(r"(?:^|[-_])step=(\d+)")


def checkpoint_base(name: str) -> str:
    """The name NeMo derives the marker from: without ``.nemo``, ``.ckpt`` and ``-EMA``."""
    return name.removesuffix(".nemo").removesuffix(".ckpt").removesuffix("-EMA")


class NemoDetector:
    """Lightning-named (``step=N``) ``.ckpt`` files and checkpoint directories."""

    name = "nemo"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim ``step=N`` checkpoints (one candidate per base name) and ``-unfinished`` markers."""
        if entry.is_file and entry.name.endswith(UNFINISHED):
            return []
        m = _STEP.search(entry.name)
        if m is None or not (entry.is_dir or entry.name.endswith(".ckpt")):
            return None
        base = checkpoint_base(entry.name)
        if entry.name != base and entry.name != base + ".ckpt":
            return []  # an EMA part: recorded with its base checkpoint
        if entry.is_file and parent.has_dir(base):
            return []
        path = parent.path / entry.name
        key = str(parent.path / base)
        return [Candidate(self.name, path, int(m.group(1)), key, {"base": base}, root=parent.root)]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete when the marker is gone and every part is written."""
        base = str(candidate.extra["base"])
        parent, root = candidate.path.parent, candidate.root
        if stat_file(parent / (base + UNFINISHED), root) is not None:
            return incomplete(f"{base}{UNFINISHED} marker is present")
        files = self._files(parent, root, base)
        if not files:
            return incomplete("no checkpoint files")
        problem, retry_after = first_unwritten(files, root), None
        if problem is None and is_dir(candidate.path, root):
            problem, retry_after = _dist_problem(candidate.path, root, files)
        if problem is not None:
            return incomplete(problem, retry_after)
        return Verdict(True, "no -unfinished marker", tuple(files))

    def _files(self, parent: Path, root: Root, base: str) -> list[FileStat]:
        files: list[FileStat] = []
        for name in (base, base + "-EMA"):
            if is_dir(parent / name, root):
                files.extend(walk_files(parent / name, root))
            elif (found := stat_file(parent / (name + ".ckpt"), root)) is not None:
                files.append(found)
        return files


def _dist_problem(directory: Path, root: Root, files: list[FileStat]) -> tuple[str | None, float | None]:
    """Why a distributed (DCP) checkpoint's directories are not complete, and when to look again."""
    stack = [directory]
    while stack:
        current = stack.pop()
        listing = list_dir(current, root)
        if looks_like_dcp(listing):
            check = dcp_check(current, root, [f for f in files if f.path.parent == current])
            if check.problem is not None:
                return f"{current.name}: {check.problem}", check.retry_after
        stack.extend(current / n for n, e in listing.entries.items() if e.is_dir)
    return None, None
