"""Detect completed checkpoint steps in watched directories.

Data flow: ``service`` (watchdog events, reconcile scans) -> ``scan`` (which entries
are checkpoints, per the ``registry`` of the detectors in ``formats/``) -> ``record``
(``hostile`` refuses a tree holding symlinks, FIFOs, devices, hard links or names tierd
cannot carry; ``hashing`` takes each file's first-sight checksum, then one catalog
transaction) -> ``changes`` (files that change after
they were recorded); ``waiting`` looks again at steps the catalog holds as waiting.
``notify`` is the HTTP path a training job uses to skip the wait. A detector implements
the ``Detector`` contract of ``detector`` and reads the tree through ``tree`` (directory
descriptors, no symlink followed).

Also: ``integrity`` (a file was written to its end), ``known`` (what the catalog holds, in
memory), ``parts`` (a node's part of a multi-node step), ``owners`` (owner, group and mode of
the directories at first sight), ``presence`` (tier 0 still holds a recorded checkpoint),
``removals`` (recorded files deleted or moved away, from the watcher's events) and
``unreadable`` (trees that cannot be walked fail alone, warned about once).
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
