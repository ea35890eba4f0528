"""Which detectors run for a root, and in which order ``auto`` tries them.

The first detector that claims a directory entry wins, and nothing inside a claimed
entry is looked at again. Outer layouts therefore come before the layouts they wrap:

1. ``hf``: ``checkpoint-N/`` holds a DeepSpeed ``global_stepN/`` + ``latest`` or FSDP
   DCP directories, which must not be recorded as checkpoints of their own.
2. ``nemo``: ``step=N`` directories are Megatron ``dist_checkpointing`` / DCP directories
   and ``.ckpt`` files are ``torch.save`` zips; the ``-unfinished`` marker must win.
3. ``megatron``: ``iter_NNNNNNN/`` in ``torch_dist`` format holds a DCP ``.metadata``.
4. ``deepspeed``: ``global_stepN/`` (or the tag ``latest`` names).
5. ``orbax``: numbered step directories with Orbax metadata, and tmp directories.
6. ``nvrx_local``: session directories of rank directories of ``iter_*_local.pt``.
7. ``dcp``: any other directory with ``.metadata`` / ``*.distcp``.
8. ``torch_save``: single ``*.pt`` / ``*.pth`` / ``*.ckpt`` files.
9. ``marker``: only when the root configures a ``marker`` file name.
"""

from __future__ import annotations

from tierd.daemon.detect.detector import Detector
from tierd.daemon.detect.formats.dcp import DcpDetector
from tierd.daemon.detect.formats.deepspeed import DeepSpeedDetector
from tierd.daemon.detect.formats.hf import HfDetector
from tierd.daemon.detect.formats.marker import MarkerDetector
from tierd.daemon.detect.formats.megatron import MegatronDetector
from tierd.daemon.detect.formats.nemo import NemoDetector
from tierd.daemon.detect.formats.nvrx import NvrxDetector
from tierd.daemon.detect.formats.orbax import OrbaxDetector
from tierd.daemon.detect.formats.torch_save import TorchSaveDetector

__all__ = ["AUTO_ORDER", "BY_NAME", "detectors_for"]

AUTO_ORDER: tuple[Detector, ...] = (
    HfDetector(),
    NemoDetector(),
    MegatronDetector(),
    DeepSpeedDetector(),
    OrbaxDetector(),
    NvrxDetector(),
    DcpDetector(),
    TorchSaveDetector(),
)
_MARKER = MarkerDetector()
BY_NAME: dict[str, Detector] = {d.name: d for d in (*AUTO_ORDER, _MARKER)}


def detectors_for(fmt: str, marker: str | None = None) -> tuple[Detector, ...]:
    """The detectors a root with ``format: fmt`` runs, in precedence order."""
    if fmt == "auto":
        return (*AUTO_ORDER, _MARKER) if marker else AUTO_ORDER
    return (BY_NAME[fmt],)
