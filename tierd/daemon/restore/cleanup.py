"""Removing what a cancelled or failed restore wrote, so nothing partial stays behind.

It removes the temporary files of every file the restore was to write, the files it placed
(all of them when the target was missing or empty when the restore was asked for: nothing
there was anyone else's), the directories that left empty below the target, and the target
itself when it was fresh. Blocking: call it through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from contextlib import suppress
from pathlib import Path

from tierd.daemon.backends.posix.remove import unlink_and_prune
from tierd.daemon.backends.posix.temp import temp_names_in, temp_stem

__all__ = ["remove_restored", "remove_temps"]


def remove_restored(
    root: Path, target: Path, names: Sequence[str], *, fresh: bool, placed: Collection[str]
) -> int:
    """Remove the restore's files under ``root`` (named by ``names``) and its leftovers; returns how many.

    ``placed`` names the files it recorded as placed (every one of ``names`` goes when
    ``fresh``). Directories emptied are pruned up to ``target``, which goes too when fresh
    and empty. Never raises: what cannot be removed is left.
    """
    removed = remove_temps(root, names)
    for name in names:
        final = root / name
        if fresh or name in placed:
            with suppress(OSError):
                if final.is_file() and not final.is_symlink():
                    unlink_and_prune(target, final)
                    removed += 1
        _prune_empty(target, final.parent)
    if fresh:
        with suppress(OSError):
            os.rmdir(target)
    return removed


def remove_temps(root: Path, names: Sequence[str]) -> int:
    """Remove the temporary files of ``names`` under ``root`` (no write of them may be under way)."""
    removed = 0
    for directory, stems in _stems_by_directory(root, names).items():
        for temp in temp_names_in(directory):
            if temp.startswith(stems):
                with suppress(OSError):
                    os.unlink(directory / temp)
                    removed += 1
    return removed


def _stems_by_directory(root: Path, names: Sequence[str]) -> dict[Path, tuple[str, ...]]:
    found: dict[Path, list[str]] = {}
    for name in names:
        final = root / name
        found.setdefault(final.parent, []).append(temp_stem(final))
    return {directory: tuple(stems) for directory, stems in found.items()}


def _prune_empty(target: Path, directory: Path) -> None:
    while directory != target and target in directory.parents:
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = directory.parent
