"""Where each selected file of a restore goes: the destination root, the target, and the names.

A restore into ``target`` writes ``<target>/<name>``, ``name`` being the file's path relative
to the checkpoint; a restore ``to: tier0`` writes the file at its own path under tier 0 (the
target is then ``<tier 0>/<checkpoint path>``). A restore by node name (``part_of``) takes only
the files that node recorded (``of_part``), before any other selection. The sources are read through
``Rebased(tier, prefix)`` so that a copy names the file the same on both sides.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierd.config import Config
from tierd.daemon.beneath import Root
from tierd.daemon.catalog.db import Session
from tierd.daemon.catalog.peer_reads import node_files
from tierd.daemon.restore.paths import anchored, local_names
from tierd.daemon.restore.select import select_names

__all__ = ["Layout", "layout_of", "of_part", "roots_of"]


@dataclass(frozen=True)
class Layout:
    """The destination of a restore and the name (under ``root``) of each selected catalog relpath."""

    root: Path
    target: Path
    prefix: str  # what a source's relpath is, less the name
    names: Mapping[str, str]  # catalog relpath -> name under root, selected files only

    def name_of(self, relpath: str) -> str:
        """The file's name under ``root``."""
        return self.names[relpath]

    def tree(self, roots: Sequence[Path]) -> Root:
        """``root`` as a ``Root`` anchored at the allowed root it lies in. Raises RestoreRefused."""
        return anchored(self.root, roots)

    def target_parts(self) -> tuple[str, ...]:
        """The target's components below ``root`` (``()`` when the target is the root)."""
        return self.target.relative_to(self.root).parts

    def directory_name(self, relpath: str) -> str | None:
        """A recorded directory's name under ``root`` (``""``: the root itself); None if outside it.

        Into a target, the checkpoint's own directory (the directory of a single-file one) is
        the target, and the directories above it are not restored; ``to: tier0`` restores
        every directory at its own path.
        """
        if not self.prefix:
            return relpath
        if relpath == self.prefix:
            return ""
        if relpath.startswith(self.prefix + "/"):
            return relpath[len(self.prefix) + 1 :]
        return None


def of_part(
    session: Session, checkpoint_id: int, detail: Mapping[str, Any], relpaths: Sequence[str]
) -> list[str]:
    """``relpaths``, only those of the part of the node ``detail`` names (``part_of``), if it names one."""
    node = detail.get("part_of")
    if node is None:
        return list(relpaths)
    mine = node_files(session, checkpoint_id, str(node))
    return [relpath for relpath in relpaths if relpath in mine]


def roots_of(config: Config, detail: Mapping[str, Any]) -> list[Path]:
    """Where the restore ``detail`` describes may write: tier 0's root, or the allowed roots."""
    return [config.tier0.path] if detail.get("to_tier0") else list(config.restore_roots)


def layout_of(config: Config, path: str, relpaths: Sequence[str], detail: Mapping[str, Any]) -> Layout:
    """The layout of a restore of the checkpoint at ``path`` with files ``relpaths``, as ``detail`` asks.

    Raises RestoreRefused when a catalog file name would land outside the target.
    """
    local = local_names(path, relpaths)
    chosen = set(select_names(list(local.values()), ranks=detail.get("ranks"), globs=detail.get("files")))
    whole_file = any(relpath == path for relpath in relpaths)
    prefix = posixpath.dirname(path) if whole_file else path
    if detail.get("to_tier0"):
        root = config.tier0.path
        names = {relpath: relpath for relpath, name in local.items() if name in chosen}
        return Layout(root, root / path, "", names)
    target = Path(detail["target"])
    names = {relpath: name for relpath, name in local.items() if name in chosen}
    return Layout(target, target, prefix, names)
