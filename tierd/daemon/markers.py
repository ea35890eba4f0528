"""Completion markers: the files whose presence tells a framework a checkpoint is complete.

Whatever removes a checkpoint removes these first, and whatever restores one places them
last, so no framework ever takes a half-removed or half-restored checkpoint for a whole one.
The names live here, below every service, so the formats that detect them, the deleter and
the restore runner all import them downward.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

__all__ = [
    "CHECKPOINT_METADATA",
    "COMMIT_SUCCESS",
    "LATEST",
    "LATEST_UNIVERSAL",
    "MARKER_NAMES",
    "METADATA",
    "SELF_MARKED_FORMATS",
    "TRACKER",
    "TRAINER_STATE",
    "marker_names",
    "split_markers",
]

#: PyTorch DCP: the coordinator's metadata file, written last.
METADATA = ".metadata"
#: DeepSpeed: the files naming the newest ``global_step`` tag (plain and universal).
LATEST = "latest"
LATEST_UNIVERSAL = "latest_universal"
#: Hugging Face Trainer: written into ``checkpoint-N/`` once the step is saved.
TRAINER_STATE = "trainer_state.json"
#: Megatron-LM: holds the newest complete iteration (or ``release``).
TRACKER = "latest_checkpointed_iteration.txt"
#: Orbax: the commit marker on object stores, and the step's metadata with commit timestamps.
COMMIT_SUCCESS = "commit_success.txt"
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"

#: Every format's marker file names (a file of one of these names is a marker in any format).
MARKER_NAMES = frozenset(
    {METADATA, LATEST, LATEST_UNIVERSAL, TRAINER_STATE, TRACKER, COMMIT_SUCCESS, CHECKPOINT_METADATA}
)
#: Formats whose checkpoint files are each their own marker (renamed into their final name).
SELF_MARKED_FORMATS = frozenset({"torch_save", "nvrx_local"})


def marker_names(*configured: str | None) -> frozenset[str]:
    """Every format's marker names and ``configured`` ones (watches' ``marker``; None: none)."""
    return MARKER_NAMES.union(name for name in configured if name)


def split_markers(
    fmt: str, relpaths: Sequence[str], *, marker: str | None = None
) -> tuple[list[str], list[str]]:
    """``relpaths`` split into (markers, the rest), each in the given order.

    ``marker`` is a watch's configured marker file name (format ``marker``).
    """
    if fmt in SELF_MARKED_FORMATS:
        return list(relpaths), []
    names = marker_names(marker)
    markers = [p for p in relpaths if posixpath.basename(p) in names]
    chosen = set(markers)
    return markers, [p for p in relpaths if p not in chosen]
