"""Removing what a cancelled or failed restore wrote, so nothing partial stays behind.

It removes the temporary files of every file the restore was to write, the files it placed
(all of them when the target was missing or empty when the restore was asked for: nothing
there was anyone else's), the directories that left empty below the target, and the target
itself when it was fresh. Everything is reached through directory descriptors from the
restore's ``Root`` (``tierd.daemon.beneath``): a directory the target's owner swapped for a
symlink is never followed. Blocking: call it through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from contextlib import suppress

from tierd.daemon.backends.posix.remove import prune, unlink_and_prune
from tierd.daemon.backends.posix.temp import temp_names_in, temp_stem
from tierd.daemon.beneath import Root, is_regular, lstat_in, split_relpath

__all__ = ["remove_restored", "remove_temps"]


def remove_restored(
    tree: Root, target: tuple[str, ...], names: Sequence[str], *, fresh: bool, placed: Collection[str]
) -> int:
    """Remove the restore's files (``names``, below the tree's top) and its leftovers; returns how many.

    ``target`` is the restore's target, as components below the top (``()`` when the top is
    the target). ``placed`` names the files it recorded as placed (every one of ``names``
    goes when ``fresh``). Directories emptied are pruned up to ``target``, which goes too
    when fresh and empty. Never raises: what cannot be removed is left.
    """
    removed = remove_temps(tree, names)
    for name in names:
        with suppress(OSError):
            place = tree.place(name)
            if (fresh or name in placed) and _is_file(tree, place.parts, place.name):
                removed += unlink_and_prune(tree, place, len(target))
            prune(tree, place.parts, len(target))
    if fresh:
        with suppress(OSError):
            _remove_target(tree, target)
    return removed


def remove_temps(tree: Root, names: Sequence[str]) -> int:
    """Remove the temporary files of ``names`` below the tree (no write of them may be under way)."""
    removed = 0
    for parts, stems in _stems_by_directory(names).items():
        try:
            directory = tree.open(parts)
        except OSError:
            continue
        with directory:
            for temp in temp_names_in(directory):
                if temp.startswith(stems):
                    with suppress(OSError):
                        os.unlink(temp, dir_fd=directory.fd)
                        removed += 1
    return removed


def _is_file(tree: Root, parts: tuple[str, ...], name: str) -> bool:
    with tree.open(parts) as directory:
        return is_regular(lstat_in(directory, name))


def _stems_by_directory(names: Sequence[str]) -> dict[tuple[str, ...], tuple[str, ...]]:
    found: dict[tuple[str, ...], list[str]] = {}
    for name in names:
        with suppress(OSError):
            parts, base = split_relpath(name)
            found.setdefault(parts, []).append(temp_stem(base))
    return {parts: tuple(stems) for parts, stems in found.items()}


def _remove_target(tree: Root, target: tuple[str, ...]) -> None:
    """Remove the target directory if it is empty (the tree's top itself when ``target`` is ``()``)."""
    if target:
        prune(tree, target, len(target) - 1)
    elif tree.below:
        prune(Root(tree.anchor, tree.below[:-1]), (tree.below[-1],))
