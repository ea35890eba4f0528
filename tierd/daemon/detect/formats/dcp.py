"""PyTorch Distributed Checkpoint (``torch.distributed.checkpoint``, FileSystemWriter).

What torch/distributed/checkpoint/filesystem.py does: every rank writes its shards as
``__{rank}_{i}.distcp`` (one or more per rank); after a gather, the coordinator pickles
the global ``Metadata`` to ``.metadata.tmp``, fsyncs it, removes any old ``.metadata``
and renames the temporary file into place. Without collectives each rank writes its own
``__{rank}.metadata`` the same way. ``Metadata.storage_data`` names, for every item, the
shard file and its byte range, so the metadata tells exactly which files must exist.

Complete when: ``.metadata`` exists, no ``*.metadata.tmp`` is left, every shard the
metadata names exists and is long enough, and no shard is newer than the metadata
(an overwrite of an old checkpoint keeps the old ``.metadata`` while new shards land).
When only some shards are here (node-local tier 0: the other nodes hold the rest) the
verdict is *partial*: this node's files, and every file the metadata names as expected.

A ``.metadata`` this reader cannot unpickle (empty, cut short, a format it does not know, or
the README's hand-made ``{}``) may be one still written in place by an older writer: it is
given ``METADATA_SETTLE_NS`` without a change, and the verdict asks to be looked at again
then (``retry_after``), so the step is recorded then without waiting for another event.
After that it is trusted as a marker that names no shards (and warned about).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import NamedTuple

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import (
    Candidate,
    Entry,
    FileStat,
    Listing,
    Settings,
    Verdict,
    incomplete,
    trailing_int,
)
from tierd.daemon.detect.integrity import MAX_PICKLE_BYTES, Stub, stub_load
from tierd.daemon.detect.tree import list_dir, read_file, walk_files
from tierd.daemon.markers import METADATA
from tierd.logs import get_logger

__all__ = ["DcpCheck", "DcpDetector", "dcp_check", "looks_like_dcp"]

log = get_logger(__name__)

_RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")
_SHARD = re.compile(r"^__(\d+)_\d+\.distcp$")
#: Clock skew allowed between the node that wrote a shard and the one that wrote .metadata.
MTIME_TOLERANCE_NS = 2_000_000_000
#: An unreadable (or empty) metadata file this recent is taken for one still being written.
METADATA_SETTLE_NS = 10_000_000_000
#: Past the settle time, so the look again finds it settled.
_SETTLE_MARGIN = 0.05


class DcpCheck(NamedTuple):
    """What ``dcp_check`` found: why not complete, what the metadata names, when to look again.

    ``problem`` None: complete. ``expected`` None: unknown, or a shard is cut short.
    """

    problem: str | None
    expected: tuple[str, ...] | None
    retry_after: float | None = None


def looks_like_dcp(listing: Listing) -> bool:
    """Whether a directory listing has DCP metadata or shards in it."""
    for name in listing.entries:
        if name.startswith(METADATA) or name.endswith(".distcp") or _RANK_METADATA.match(name):
            return True
    return False


def _storage_sizes(path: Path, root: Root) -> dict[str, int] | None:
    """File name -> minimum length, from a ``.metadata`` pickle; None if unreadable."""
    try:
        metadata = stub_load(read_file(path, root, MAX_PICKLE_BYTES))
    except (OSError, ValueError):
        return None
    storage = metadata.field("storage_data") if isinstance(metadata, Stub) else None
    if not isinstance(storage, dict):
        return None
    sizes: dict[str, int] = {}
    for info in storage.values():
        if not isinstance(info, Stub):
            return None
        rel, offset, length = (info.field(k) for k in ("relative_path", "offset", "length"))
        if not isinstance(rel, str) or not isinstance(offset, int) or not isinstance(length, int):
            return None
        sizes[rel] = max(sizes.get(rel, 0), offset + length)
    return sizes


def _metadata_files(listing: Listing) -> list[str] | str:
    """The metadata files to trust, or the reason the directory is not complete."""
    names = listing.entries
    if any(n.endswith(".metadata.tmp") for n in names):
        return "a .metadata.tmp is still being written"
    if listing.has_file(METADATA):
        return [METADATA]
    ranks = {int(m.group(1)) for n in names if (m := _RANK_METADATA.match(n))}
    if not ranks:
        return "no .metadata yet"
    writers = {int(m.group(1)) for n in names if (m := _SHARD.match(n))}
    if not writers <= ranks or 0 not in ranks:
        return f"ranks {sorted(writers - ranks)} have shards but no __rank.metadata yet"
    return [f"__{r}.metadata" for r in sorted(ranks)]


def _unsettled(meta: str, found: FileStat | None) -> DcpCheck | None:
    """A not-yet verdict for an unreadable ``meta`` changed within the settle time, else None."""
    if found is None:
        return DcpCheck(f"{meta} is gone", None)
    age_ns = time.time_ns() - found.mtime_ns
    if age_ns >= METADATA_SETTLE_NS:
        return None
    wait = (METADATA_SETTLE_NS - max(age_ns, 0)) / 1e9 + _SETTLE_MARGIN
    settle = METADATA_SETTLE_NS / 1e9
    reason = f"{meta} is not readable: taken for one still being written until unchanged for {settle:g}s"
    return DcpCheck(reason, None, wait)


def dcp_check(directory: Path, root: Root, files: list[FileStat]) -> DcpCheck:
    """Whether the DCP checkpoint in ``directory`` (below ``root``) is complete (``DcpCheck``).

    ``retry_after`` is set when only time can change the answer (an unreadable ``.metadata``).
    """
    listing = list_dir(directory, root)
    metas = _metadata_files(listing)
    if isinstance(metas, str):
        return DcpCheck(metas, None)
    by_name = {f.path.name: f for f in files if f.path.parent == directory}
    expected: dict[str, int] = {}
    for meta in metas:
        sizes = _storage_sizes(directory / meta, root)
        if sizes is None:
            if (waiting := _unsettled(meta, by_name.get(meta))) is not None:
                return waiting
            # Stable and still unreadable (a format this reader does not know): it names nothing.
            log.warning("dcp_metadata_unreadable", path=str(directory / meta))
            sizes = {}
        expected.update(sizes)
    absent = sorted(rel for rel in expected if rel not in by_name)
    for rel, size in sorted(expected.items()):
        found = by_name.get(rel)
        if found is not None and found.size < size:
            return DcpCheck(f"shard {rel} is shorter than the metadata says", None)
    newest_meta = max((by_name[m].mtime_ns for m in metas if m in by_name), default=0)
    shards = [f for n, f in by_name.items() if n.endswith(".distcp") or n in expected]
    if any(s.mtime_ns > newest_meta + MTIME_TOLERANCE_NS for s in shards):
        return DcpCheck("shards are newer than .metadata (an overwrite is in progress)", None)
    named = (*metas, *sorted(expected))
    if absent:
        # On node-local tier 0 the other nodes hold these: this node's files are its part.
        return DcpCheck(f"shard {absent[0]} named by the metadata is missing", named)
    return DcpCheck(None, named)


class DcpDetector:
    """A directory holding ``.metadata`` and ``__R_I.distcp`` shards."""

    name = "dcp"

    def match(self, entry: Entry, parent: Listing, settings: Settings) -> list[Candidate] | None:
        """Claim a directory that has DCP metadata or shards in it."""
        if not entry.is_dir:
            return None
        path = parent.path / entry.name
        if not looks_like_dcp(list_dir(path, parent.root)):
            return None
        return [Candidate(self.name, path, trailing_int(entry.name), str(path), root=parent.root)]

    def inspect(self, candidate: Candidate, settings: Settings) -> Verdict:
        """Complete when the metadata is in place and every shard it names is written."""
        early = _metadata_files(list_dir(candidate.path, candidate.root))
        if isinstance(early, str):  # cheap: no walk while shards are still being written
            return incomplete(early)
        files = walk_files(candidate.path, candidate.root)
        problem, expected, retry_after = dcp_check(candidate.path, candidate.root, files)
        if problem is not None and expected is not None:
            return Verdict(False, problem, tuple(files), partial=True, expected=expected)
        if problem is not None:
            return incomplete(problem, retry_after)
        reason = ".metadata committed and every shard present"
        return Verdict(True, reason, tuple(files), expected=expected)
