"""Detect completed checkpoint steps in watched directories.

Data flow: ``service`` (watchdog events, reconcile scans) -> ``scan`` (which entries
are checkpoints, per the ``registry`` of the detectors in ``formats/``) -> ``record``
(``hostile`` refuses a tree holding symlinks, FIFOs, devices, hard links or names tierd
cannot carry; hash, then one catalog transaction) -> ``changes`` (files that change after
they were recorded); ``waiting`` looks again at steps the catalog holds as waiting.
``notify`` is the HTTP path a training job uses to skip the wait. A detector implements
``detector.Detector`` and reads the tree through ``tree`` (directory descriptors, no
symlink followed).
"""

from tierd.daemon.detect.detector import Candidate, Detector, FileStat, Settings, Verdict
from tierd.daemon.detect.registry import AUTO_ORDER, BY_NAME, detectors_for
from tierd.daemon.detect.scan import Found, RootSpec, detect_path, scan_chain, scan_root

__all__ = [
    "AUTO_ORDER",
    "BY_NAME",
    "Candidate",
    "Detector",
    "FileStat",
    "Found",
    "RootSpec",
    "Settings",
    "Verdict",
    "detect_path",
    "detectors_for",
    "scan_chain",
    "scan_root",
]
