"""Which files of a checkpoint a restore takes: those of some ranks, those matching globs.

``ranks`` keeps each rank's own shard files and every file no rank owns (the metadata every
rank needs), for the layouts that name ranks in file names:

- PyTorch DCP: ``__{rank}_{i}.distcp`` belongs to ``rank``; ``.metadata`` and the rest are shared.
- DeepSpeed: ``[bf16_]zero_pp_rank_{d}_mp_rank_{m}_optim_states.pt`` belongs to the global rank
  whose data-parallel rank is ``d`` and model-parallel rank is ``m``; ``mp_rank_{m}_model_states.pt``
  to every rank of model-parallel rank ``m`` (model-parallel ranks vary fastest: global rank
  ``r`` has ``m = r mod M`` and ``d = (r div M) mod D``, M and D counted from the files).
- Megatron-LM: a directory ``mp_rank_{tp}[_{pp}][_{ep}]`` belongs to model-parallel index
  ``tp + TP * pp``, which global rank ``r`` takes when it is ``r mod (TP * PP)`` (tensor
  ranks fastest).
- Other files naming ``rank_{r}`` (``model_rank_3.pt``) belong to rank ``r``.

``files`` globs (``fnmatch``, ``*`` crossing ``/``) match names relative to the checkpoint; a
glob without ``/`` also matches a base name. With both, a file must pass both.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Sequence
from fnmatch import fnmatchcase

__all__ = ["select_names"]

_DCP_SHARD = re.compile(r"^__(\d+)_\d+\.distcp$")
_DS_ZERO = re.compile(r"zero_pp_rank_(\d+)_mp_rank_(\d+)")
_DS_MODEL = re.compile(r"(?:^|_)mp_rank_(\d+)_model_states")
_MEGATRON_DIR = re.compile(r"^mp_rank_(\d+)(?:_(\d+))?(?:_(\d+))?$")
_RANK = re.compile(r"(?:^|[_.-])rank[_-]?(\d+)(?:[_.-]|$)")


def select_names(
    names: Sequence[str], *, ranks: Collection[int] | None, globs: Sequence[str] | None
) -> list[str]:
    """The ``names`` (relative to the checkpoint) a restore takes, in the given order."""
    chosen = list(names)
    if ranks is not None:
        owner = _Owners(names)
        wanted = set(ranks)
        chosen = [name for name in chosen if owner.needed_by(name, wanted)]
    if globs is not None:
        chosen = [name for name in chosen if any(_matches(name, glob) for glob in globs)]
    return chosen


def _matches(name: str, glob: str) -> bool:
    if fnmatchcase(name, glob):
        return True
    return "/" not in glob and fnmatchcase(posixpath.basename(name), glob)


class _Owners:
    """Which ranks need each file, with the parallel sizes the checkpoint's names reveal."""

    def __init__(self, names: Sequence[str]) -> None:
        zero = [m for name in names if (m := _DS_ZERO.search(posixpath.basename(name)))]
        model = [m for name in names if (m := _DS_MODEL.search(posixpath.basename(name)))]
        self.ds_mp = max(len({int(m[2]) for m in zero} | {int(m[1]) for m in model}), 1)
        self.ds_dp = max(len({int(m[1]) for m in zero}), 1)
        dirs = [m for name in names for part in name.split("/")[:-1] if (m := _MEGATRON_DIR.match(part))]
        self.tp = max(len({int(m[1]) for m in dirs}), 1)
        self.pp = max(len({int(m[2] or 0) for m in dirs}), 1)

    def needed_by(self, name: str, ranks: set[int]) -> bool:
        """Whether any of ``ranks`` needs ``name`` (a file no rank owns: every rank does)."""
        base = posixpath.basename(name)
        if (shard := _DCP_SHARD.match(base)) is not None:
            return int(shard[1]) in ranks
        if (zero := _DS_ZERO.search(base)) is not None:
            dp, mp = int(zero[1]), int(zero[2])
            return any(r % self.ds_mp == mp and (r // self.ds_mp) % self.ds_dp == dp for r in ranks)
        if (model := _DS_MODEL.search(base)) is not None:
            return any(r % self.ds_mp == int(model[1]) for r in ranks)
        for part in name.split("/")[:-1]:
            if (found := _MEGATRON_DIR.match(part)) is not None:
                index = int(found[1]) + self.tp * int(found[2] or 0)
                return any(r % (self.tp * self.pp) == index for r in ranks)
        if (rank := _RANK.search(base)) is not None:
            return int(rank[1]) in ranks
        return True
