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

__all__ = ["remove_restored"]


def remove_restored(
    root: Path, target: Path, names: Sequence[str], *, fresh: bool, placed: Collection[str]
) -> int:
    """Remove the restore's files under ``root`` (named by ``names``) and its leftovers; returns how many.

    ``placed`` names the files it recorded as placed (every one of ``names`` goes when
    ``fresh``). Directories emptied are pruned up to ``target``, which goes too when fresh
    and empty. Never raises: what cannot be removed is left.
    """
    removed = 0
    for name in names:
        final = root / name
        stem = temp_stem(final)
        for temp in temp_names_in(final.parent):
            if temp.startswith(stem):
                with suppress(OSError):
                    os.unlink(final.parent / temp)
                    removed += 1
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


def _prune_empty(target: Path, directory: Path) -> None:
    while directory != target and target in directory.parents:
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = directory.parent
