"""Where a restore may write, and the name each file of the checkpoint gets there.

A target must be an absolute path without ``..``, inside one of ``restore.allowed_roots``
once every symlink on its way is resolved, and (unless the request says ``overwrite``)
either missing or an empty directory. Once checked, it is only ever reached through
descriptors from the allowed root it lies in (``anchored``: a ``beneath.Root``), so a
component swapped for a symlink afterwards leads nowhere. Every file name the catalog holds must be a clean
relative path under the checkpoint's path, so that no name lands outside the target.
Each check raises RestoreRefused (422 in the API). The functions touching the file system
block: call them through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from tierd.daemon.backends.base import check_relpath
from tierd.daemon.beneath import Root
from tierd.errors import RestoreRefused

__all__ = ["anchored", "check_target", "is_fresh", "local_names"]


def check_target(target: str, roots: Sequence[Path], *, overwrite: bool) -> Path:
    """The real directory ``target`` names, once checked (see the module docstring).

    Raises RestoreRefused naming what is wrong.
    """
    if not target.startswith("/"):
        raise RestoreRefused(f"target {target!r} is not an absolute path")
    if ".." in PurePosixPath(target).parts:
        raise RestoreRefused(f"target {target!r} has a '..' component")
    try:
        real = Path(os.path.realpath(target))
        real_roots = [Path(os.path.realpath(root)) for root in roots]
        if not any(_within(real, root) for root in real_roots):
            lexical = Path(os.path.normpath(target))
            if any(_within(lexical, root) for root in [*roots, *real_roots]):
                raise RestoreRefused(
                    f"target {target} leads through a symlink to {real}, outside {_names(roots)}"
                )
            raise RestoreRefused(f"target {target} is outside the allowed roots {_names(roots)}")
        try:
            fresh = is_fresh(anchored(real, real_roots))
        except NotADirectoryError:
            raise RestoreRefused(f"target {target} exists and is not a directory") from None
        if not overwrite and not fresh:
            raise RestoreRefused(f"target {target} exists and is not an empty directory (set overwrite)")
    except OSError as exc:
        raise RestoreRefused(f"target {target}: cannot inspect it: {exc.strerror or exc}") from None
    return real


def anchored(path: Path, roots: Sequence[Path]) -> Root:
    """``path`` as a ``Root`` anchored at the allowed root it lies in (its own components walked).

    ``path`` is a checked target (``check_target``), or a tier's root. Raises RestoreRefused
    when it lies in none of ``roots`` (as given, or with their symlinks resolved).
    """
    for root in roots:
        for anchor in (root, Path(os.path.realpath(root))):
            if _within(path, anchor):
                return Root(anchor, path.relative_to(anchor).parts)
    raise RestoreRefused(f"target {path} is outside the allowed roots {_names(roots)}")


def is_fresh(tree: Root) -> bool:
    """Whether the tree's top is missing or an empty directory (blocking).

    Raises OSError(ENOTDIR) when it, or a component below the anchor, is not a directory
    (a file, or a symlink: never followed).
    """
    try:
        top = tree.open()
    except FileNotFoundError:
        return True
    with top, os.scandir(top.fd) as entries:
        return next(entries, None) is None


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _names(roots: Sequence[Path]) -> str:
    return ", ".join(str(root) for root in roots)


def local_names(path: str, relpaths: Sequence[str]) -> dict[str, str]:
    """Each file's name relative to the checkpoint (relpath -> name), for a checkpoint at ``path``.

    A checkpoint that is one file (its path is the file's) keeps the file's base name.
    Raises RestoreRefused when a name is absolute, has ``..``, or is not under ``path``.
    """
    names: dict[str, str] = {}
    prefix = path.rstrip("/") + "/" if path else ""
    for relpath in relpaths:
        try:
            check_relpath(relpath)
        except ValueError as exc:
            raise RestoreRefused(f"the catalog holds a file name no restore may write: {exc}") from None
        if relpath == path:
            names[relpath] = posixpath.basename(relpath)
        elif relpath.startswith(prefix):
            names[relpath] = relpath[len(prefix) :]
        else:
            raise RestoreRefused(
                f"the catalog's file {relpath!r} is not under the checkpoint's path {path!r}"
            )
    return names
