"""Completion markers: the files whose presence tells a framework a checkpoint is complete.

Whatever removes a checkpoint removes these first, and whatever restores one places them
last, so no framework ever takes a half-removed or half-restored checkpoint for a whole one.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from tierd.daemon.detect.formats.dcp import METADATA
from tierd.daemon.detect.formats.deepspeed import LATEST, LATEST_UNIVERSAL
from tierd.daemon.detect.formats.hf import TRAINER_STATE
from tierd.daemon.detect.formats.megatron import TRACKER
from tierd.daemon.detect.formats.orbax import CHECKPOINT_METADATA, COMMIT_SUCCESS

__all__ = ["MARKER_NAMES", "split_markers"]

#: Every format's marker file names (a file of one of these names is a marker in any format).
MARKER_NAMES = frozenset(
    {METADATA, LATEST, LATEST_UNIVERSAL, TRAINER_STATE, TRACKER, COMMIT_SUCCESS, CHECKPOINT_METADATA}
)
#: Formats whose checkpoint files are each their own marker (renamed into their final name).
SELF_MARKED_FORMATS = frozenset({"torch_save", "nvrx_local"})


def split_markers(
    fmt: str, relpaths: Sequence[str], *, marker: str | None = None
) -> tuple[list[str], list[str]]:
    """``relpaths`` split into (markers, the rest), each in the given order.

    ``marker`` is a watch's configured marker file name (format ``marker``).
    """
    if fmt in SELF_MARKED_FORMATS:
        return list(relpaths), []
    names = MARKER_NAMES | {marker} if marker else MARKER_NAMES
    markers = [p for p in relpaths if posixpath.basename(p) in names]
    chosen = set(markers)
    return markers, [p for p in relpaths if p not in chosen]
