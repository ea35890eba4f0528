"""Staged small files with no name at all (``O_TMPFILE``), linked into place at their commit.

A staged file under a temporary name costs its directory two more updates than the copy
needs: the temporary name's entry made, then, at the rename, removed again beside the
final one made. An ``O_TMPFILE`` file is an inode with no name: ``linkat`` gives it its
final name at the commit, in one directory update, as a plain create would. Nothing
partial is ever visible (the file has no name until it is complete and durable), and a
crash leaves nothing to sweep: a file nobody named is freed with its last descriptor (after
a crash, by ext4's and XFS's orphan lists at the next mount; on a file system without a
journal, by the fsck any crash calls for). The descriptor stays open from the
staging to the commit, so at most ``MAX_OPEN`` of them (a quarter of the process's file
limit) are held at once; past that, and where the file system or the kernel refuses
``O_TMPFILE`` or the link, a file is staged under a temporary name as before
(``posix.temp``).

The link is made with ``linkat(fd, "", dir, name, AT_EMPTY_PATH)`` (root, or any caller on
Linux 6.10 and later), else through ``/proc/self/fd/N``: tried once per tier and process on
a probe file linked under a temporary name and removed at once. A final name that exists
already (a copy being replaced) is linked under a temporary name first and renamed over it,
so the replacement stays atomic. Every function blocks: call them through
``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import threading
import weakref
from contextlib import suppress
from pathlib import Path

from tierd.daemon import libc
from tierd.daemon.backends.base import Ownership
from tierd.daemon.backends.posix.temp import TEMP_MARK, TempFile, random_suffix, temp_stem
from tierd.daemon.beneath import Dir, Place, Root

__all__ = ["MAX_OPEN", "UnnamedFile", "open_count"]

_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_AT_EMPTY_PATH = 0x1000
#: What ``open(O_TMPFILE)`` answers where the file system or the kernel has none.
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EISDIR, errno.EINVAL, errno.ENOSYS})
#: What a link method answers where it is not allowed or not there (no /proc, no privilege).
_NO_LINK = frozenset({errno.ENOENT, errno.EPERM, errno.EACCES, errno.EINVAL, errno.EXDEV, errno.ENOSYS})
_linkat = libc.function(
    "linkat", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
)


def _file_limit() -> int:
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 0
    return 4096 if soft == resource.RLIM_INFINITY else soft


#: Unnamed files held open at once, at most (past it files are staged under temporary names).
MAX_OPEN = _file_limit() // 4
_open = 0
_open_lock = threading.Lock()
#: Per tree: how its unnamed files are linked (``empty`` or ``proc``), or None (they are not).
_methods: weakref.WeakKeyDictionary[Root, str | None] = weakref.WeakKeyDictionary()


def open_count() -> int:
    """Unnamed files open now (for tests)."""
    return _open


def _link(fd: int, directory: Dir, name: str, method: str) -> None:
    """Give the open unnamed file ``fd`` the name ``name`` in ``directory``. Raises OSError."""
    if method == "empty":
        if _linkat is None:
            raise OSError(errno.ENOSYS, "no linkat")
        if _linkat(fd, b"", directory.fd, os.fsencode(name), _AT_EMPTY_PATH) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), name)
        return
    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=directory.fd, follow_symlinks=True)


def _open_unnamed(directory: Dir) -> int:
    return os.open(".", _O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600, dir_fd=directory.fd)


def _probe(directory: Dir) -> str | None:
    """How unnamed files are linked in ``directory``'s file system; None: not at all.

    Raises OSError for anything but a refusal (ENOSPC, EIO, ...).
    """
    if not _O_TMPFILE:
        return None
    try:
        fd = _open_unnamed(directory)
    except OSError as exc:
        if exc.errno in _NO_TMPFILE:
            return None
        raise
    try:
        for method in ("empty", "proc"):
            name = f".probe{TEMP_MARK}{random_suffix()}"
            try:
                _link(fd, directory, name, method)
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                continue
            os.unlink(name, dir_fd=directory.fd)
            return method
        return None
    finally:
        os.close(fd)


class UnnamedFile(TempFile):
    """A ``TempFile`` with no name: parked open, linked under its final name by ``rename_into``."""

    def __init__(self, fd: int, directory: Dir, owner: Ownership | None, method: str) -> None:
        super().__init__(fd, directory, "", owner)
        self.method = method

    @property
    def path(self) -> Path:
        """Its directory (it has no name there), for messages."""
        return self.dir.path

    @classmethod
    def open_in(cls, final: Place, owner: Ownership | None = None) -> UnnamedFile | None:
        """A fresh unnamed file in ``final``'s directory (made if missing); None: stage it named.

        None when ``MAX_OPEN`` are open, or the tree's file system cannot have them. Raises
        OSError: ENOENT when the root is missing, ENOTDIR when a symlink is on the way.
        """
        global _open
        with _open_lock:
            if _open >= MAX_OPEN:
                return None
            _open += 1
        try:
            made = cls._open_in(final, owner)
        except BaseException:
            _count_closed()
            raise
        if made is None:
            _count_closed()
        return made

    @classmethod
    def _open_in(cls, final: Place, owner: Ownership | None) -> UnnamedFile | None:
        root = final.root
        for attempt in range(3):
            directory = final.dir(create=True)
            method = _methods[root] if root in _methods else _methods.setdefault(root, _probe(directory))
            if method is None:
                return None
            try:
                return cls(_open_unnamed(directory), directory, owner, method)
            except FileNotFoundError:  # the directory was removed since it was opened
                root.forget(final.parts)
                if attempt == 2:
                    raise
            except OSError as exc:
                if exc.errno not in _NO_TMPFILE:
                    raise
                _methods[root] = None  # a file system under the root without them
                return None
        raise AssertionError("unreachable")

    def park(self) -> None:
        """Give it its final owner and mode; it stays open (it has no name to be reopened by)."""
        self._finish()

    def fsync_parked(self) -> None:
        """Fsync it through its descriptor."""
        os.fsync(self.fd)

    def rename_into(self, final: Place) -> None:
        """Link it under ``final``'s name and close it (its directory still to be fsynced).

        A file already under that name is replaced atomically: linked under a temporary
        name first, then renamed over it.
        """
        try:
            _link(self.fd, self.dir, final.name, self.method)
        except FileExistsError:
            self._replace(final)
        self._close()

    def _replace(self, final: Place) -> None:
        twin = TempFile(-1, self.dir, f"{temp_stem(final.name)}{random_suffix()}")
        twin.mark_live()  # this process's sweeps leave it until the rename
        try:
            _link(self.fd, self.dir, twin.name, self.method)
            try:
                twin.rename_into(final)
            except BaseException:
                with suppress(OSError):
                    os.unlink(twin.name, dir_fd=self.dir.fd)
                raise
        finally:
            twin._forget()

    def discard(self) -> None:
        """Close it: a file with no name is gone with its descriptor."""
        with suppress(OSError):
            self._close()

    def _close(self) -> None:
        if self.fd < 0:
            return
        try:
            super()._close()
        finally:
            _count_closed()


def _count_closed() -> None:
    global _open
    with _open_lock:
        _open -= 1
