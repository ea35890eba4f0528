"""What makes tierd refuse a checkpoint: entries it will not read, names it cannot carry.

tierd usually runs as root and tier 0 is written by training jobs, so a checkpoint's tree
is untrusted. Before any of its files is opened, the whole tree is listed (``lstat``
only, through directory descriptors from the tier-0 root, no symlink followed: ``tree``)
and the checkpoint is refused (``Refused``: nothing recorded, an
audit event ``refused`` says why) when it holds:

* a **symlink**: it may lead anywhere (``/etc/shadow``); tierd never follows one;
* a **FIFO, socket or device**: opening a FIFO blocks, a device is not checkpoint data;
* a **hard-linked file** (more than one link): another name of the same inode may lie
  outside the watched roots (``/etc/shadow`` on the same file system), and tierd cannot
  tell where;
* a **name** that is not valid UTF-8, or holds a control character (a newline, a tab):
  the catalog, the JSON API and S3 keys could not carry it faithfully.

No framework tierd knows writes any of these inside a checkpoint (DCP, DeepSpeed,
Megatron-LM, NeMo, Orbax, the HF Trainer and ``torch.save`` write regular files and
directories). Lightning's and NeMo's ``save_last="link"`` put a ``last`` symlink *beside*
the checkpoints: it is no checkpoint, never followed, and not refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import FileStat
from tierd.daemon.detect.tree import lstat_path, walk_tree
from tierd.errors import Refused

__all__ = ["MAX_LISTED", "Offence", "check_checkpoint", "find_offences", "name_problem", "printable"]

#: How many offending entries a refusal names (the count says how many there are).
MAX_LISTED = 20


@dataclass(frozen=True)
class Offence:
    """One entry tierd will not read: its path under tier 0 (printable) and what it is."""

    path: str
    kind: str


def printable(name: str) -> str:
    """``name`` with undecodable bytes and control characters escaped as Python does (for logs, JSON)."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def name_problem(name: str) -> str | None:
    """Why tierd cannot carry the file name ``name`` faithfully, or None."""
    if any("\udc80" <= ch <= "\udcff" for ch in name):
        return "name is not valid UTF-8"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return "name holds a control character"
    if name in (".", ".."):
        return "name is a '.' or '..' component"
    return None


def _kind(mode: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        return "device"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "special file"


class _Collector:
    def __init__(self, tier0: Path) -> None:
        self.tier0 = tier0
        self.root = Root(tier0)
        self.found: dict[str, Offence] = {}

    def add(self, path: Path, kind: str) -> None:
        shown = printable(path.relative_to(self.tier0).as_posix())
        self.found.setdefault(shown, Offence(shown, kind))

    def entry(self, path: Path, st: os.stat_result) -> None:
        """Check one entry's name and kind (its lstat)."""
        if (problem := name_problem(path.name)) is not None:
            self.add(path, problem)
        elif (kind := _kind(st.st_mode)) is not None:
            self.add(path, kind)
        elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            self.add(path, f"hard link ({st.st_nlink} links)")

    def walk(self, top: Path) -> None:
        """Every entry below the directory ``top`` (``walk_tree``: raises OSError as it does)."""
        for directory, entries in walk_tree(top, self.root):
            for item in entries:
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                self.entry(directory / item.name, st)


def find_offences(tier0: Path, relpath: str, files: Iterable[FileStat]) -> list[Offence]:
    """What in the checkpoint at ``relpath`` (and among ``files``) tierd will not read (blocking).

    Lists the tree with ``lstat`` only, through directory descriptors; opens no file.
    Sorted by path. Raises OSError when a directory of the tree cannot be walked.
    """
    found = _Collector(tier0)
    top = tier0 / relpath
    for part in PurePosixPath(relpath).parts:
        if (problem := name_problem(part)) is not None:
            found.add(top, f"checkpoint path: {problem}")
    st = lstat_path(top, found.root)
    if st is not None:
        found.entry(top, st)
        if stat.S_ISDIR(st.st_mode):
            found.walk(top)
    for f in files:
        if top in f.path.parents or f.path == top:
            continue  # listed above; a file beside the checkpoint (NeMo's .ckpt) is not
        if (beside := lstat_path(f.path, found.root)) is not None:
            found.entry(f.path, beside)
    return sorted(found.found.values(), key=lambda o: o.path)


def check_checkpoint(tier0: Path, relpath: str, files: Sequence[FileStat]) -> None:
    """Raise Refused when ``find_offences`` finds anything (blocking)."""
    offences = find_offences(tier0, relpath, files)
    if not offences:
        return
    kinds = sorted({o.kind for o in offences})
    first = offences[0]
    more = f" and {len(offences) - 1} more" if len(offences) > 1 else ""
    reason = (
        f"refused: {first.path} ({first.kind}){more}; tierd reads only regular, singly linked files "
        f"with UTF-8 names without control characters ({', '.join(kinds)} found)"
    )
    listed = [{"path": o.path, "kind": o.kind} for o in offences[:MAX_LISTED]]
    raise Refused(reason, listed, len(offences))
