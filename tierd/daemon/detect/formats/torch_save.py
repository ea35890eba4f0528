"""Single files from ``torch.save`` (and Lightning's ``trainer.save_checkpoint``).

``torch.save`` writes a zip whose end record comes last, so a file under its final name
that ends in a consistent end record is fully written, whether it was renamed into place
or written (or copied, as fsspec does across file systems) there directly. A legacy
(non-zip) file is complete once unchanged for ``settle_seconds``. Temporary names
(``*.tmp``, ``*~``, ``*.partial``, hidden files, ...) and the shard names of other formats
(``mp_rank_00_model_states.pt``, ``rng_state_0.pth``, ...) are never candidates.
"""

from __future__ import annotations

import re
import time

from tierd.daemon.detect.detector import (
    Candidate,
    Entry,
    Listing,
    Settings,
    Verdict,
    incomplete,
    is_temp_name,
    trailing_int,
)
from tierd.daemon.detect.formats.nvrx import LOCAL_FILE
from tierd.daemon.detect.integrity import zip_complete
from tierd.daemon.detect.tree import stat_file

__all__ = ["SUFFIXES", "TorchSaveDetector", "step_from_name"]

SUFFIXES = (".pt", ".pth", ".ckpt")
#: Shard names other formats write before their commit signal: never checkpoints of their own.
_FOREIGN = re.compile(
    r"(mp_rank_\d+|zero_pp_rank_\d+|expp_rank_\d+|^layer_\d+-model_|^model_optim_rng\.pt$"
    r"|^distrib_optim\.pt$|^rng_state(_\d+)?\.pth$|^(optimizer|scheduler|scaler|common)\.pt$)"
)
_STEP_PATTERNS = (
    re.compile(r"(?:global_)?step[=_-]?(\d+)", re.IGNORECASE),
    re.compile(r"iter(?:ation)?[=_-]?(\d+)", re.IGNORECASE),
    re.compile(r"checkpoint[=_-]?(\d+)", re.IGNORECASE),
)


def step_from_name(name: str) -> int | None:
    """The step a file name states (``step=N``, ``iter_N``, ...), else its last number."""
    stem = name.rsplit(".", 1)[0]
    for pattern in _STEP_PATTERNS:
        if m := pattern.search(stem):
            return int(m.group(1))
    return trailing_int(stem)


class TorchSaveDetector:
    """``*.pt`` / ``*.pth`` / ``*.ckpt`` files under their final names."""

    name = "torch_save"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim weights files with a final (not temporary) name."""
        if not entry.is_file or not entry.name.endswith(SUFFIXES):
            return None
        if is_temp_name(entry.name) or LOCAL_FILE.match(entry.name) or _FOREIGN.search(entry.name):
            return None
        path = parent.path / entry.name
        return [Candidate(self.name, path, step_from_name(entry.name), str(path), root=parent.root)]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete when the zip is whole, or (legacy format) after ``settle_seconds`` unchanged."""
        st = stat_file(candidate.path, candidate.root)
        if st is None:
            return incomplete("file is gone")
        whole = zip_complete(candidate.path, candidate.root)
        if whole:
            return Verdict(True, "zip end record written", (st,))
        if whole is False:
            return incomplete("zip end record not written yet")
        age = time.time() - st.mtime_ns / 1e9
        if age < settings.settle_seconds:
            return incomplete("not a zip: waiting for it to settle", settings.settle_seconds - age)
        return Verdict(True, f"unchanged for {settings.settle_seconds:g}s", (st,))
