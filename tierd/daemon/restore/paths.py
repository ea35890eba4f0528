"""Where a restore may write, and the name each file of the checkpoint gets there.

A target must be an absolute path without ``..``, inside one of ``restore.allowed_roots``
once every symlink on its way is resolved, and (unless the request says ``overwrite``)
either missing or an empty directory. Every file name the catalog holds must be a clean
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
from tierd.errors import RestoreRefused

__all__ = ["check_target", "is_fresh", "local_names"]


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
        if real.exists() and not overwrite and not is_fresh(real):
            raise RestoreRefused(f"target {target} exists and is not an empty directory (set overwrite)")
        if real.exists() and not real.is_dir():
            raise RestoreRefused(f"target {target} exists and is not a directory")
    except OSError as exc:
        raise RestoreRefused(f"target {target}: cannot inspect it: {exc.strerror or exc}") from None
    return real


def is_fresh(path: Path) -> bool:
    """Whether ``path`` is missing or an empty directory (blocking)."""
    if not path.exists():
        return True
    if not path.is_dir():
        return False
    with os.scandir(path) as entries:
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
