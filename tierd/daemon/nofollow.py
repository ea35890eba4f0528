"""Opening a tier's files for reading: no symlink followed below the root, no FIFO waited on.

tierd usually runs as root, and tier 0 is written by training jobs: a file recorded as
regular can be swapped for a symlink (to ``/etc/shadow``) or a FIFO after it was
recorded. ``open_regular`` walks from the tier's root one component at a time
(``openat`` with ``O_NOFOLLOW``), so a symlink anywhere below the root fails the open
(ELOOP for the file itself, ENOTDIR for a directory on the way) instead of leading out;
only what ``lstat`` says is a regular file is opened (a FIFO, socket or device never is),
``O_NONBLOCK`` (a FIFO swapped in at that instant opens at once instead of blocking a
worker forever), and it must be the same regular file once open. The root itself is
the operator's configuration and may be reached through symlinks; a ``beneath.Root`` is
walked from its anchor, its own components below it included.

Directories on the way are opened ``O_PATH`` (no read permission checked, nothing read):
a file three levels down costs four ``openat`` and four ``close`` more than a plain open
(opening, stating and reading 600 files of 8 KiB three levels down: 5 us a file became
17-39 us on this 2-core VM under a load average of 17); ``Opener`` keeps the directories it
walked open (the most recent ``Opener.MAX_DIRECTORIES``) and walks a new one from its
nearest open ancestor, so a batch of files costs nearly what plain opens do (6-14 us), also
when consecutive files lie in different directories (a checkpoint's ``rank0/``,
``rank1/``, ... interleaved: keeping only the last directory open walked from the root again
for every file, 11 ``openat`` and 11 ``close`` per file copied).
``O_NONBLOCK`` does nothing to reads of a regular file.
Every function blocks: call it through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import OrderedDict
from pathlib import Path

from tierd.daemon.beneath import Root

__all__ = ["READ_FLAGS", "Opener", "open_regular", "read_regular"]

#: How a file itself is opened: read-only, no symlink, no wait for a FIFO's writer.
READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_DIR_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)


Base = Path | Root  # a trusted directory, or a Root (its components below the anchor walked too)


def _top(root: Base) -> Path:
    return root.top if isinstance(root, Root) else root


def _components(path: str | Path, root: Base) -> tuple[str, ...]:
    """``path``'s names below ``root`` (string work: ``Path.relative_to`` costs 8 us a call here)."""
    text, base = os.fspath(path), os.fspath(_top(root)).rstrip("/")
    if not text.startswith(base + "/"):
        raise OSError(errno.EXDEV, f"not under {root}", text)
    parts = tuple(text[len(base) + 1 :].split("/"))
    if any(p in ("", ".", "..") for p in parts):
        raise OSError(errno.EINVAL, f"not a file name under {root}", text)
    return parts


def _directory(root: Base, parts: tuple[str, ...]) -> int:
    """An ``O_PATH`` fd of ``root/parts...``, each component opened without following a symlink."""
    anchor, above = (root.anchor, root.below) if isinstance(root, Root) else (root, ())
    directory = os.open(anchor, os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY))
    try:
        for part in (*above, *parts):
            below = os.open(part, _DIR_FLAGS, dir_fd=directory)
            os.close(directory)
            directory = below
    except BaseException:
        os.close(directory)
        raise
    return directory


def _open_in(directory: int, name: str, path: str | Path, single_link: bool) -> tuple[int, os.stat_result]:
    """Open ``name`` in ``directory`` if ``lstat`` says it is a regular file, and it still is once open.

    Returns the descriptor and its ``fstat``.
    """
    seen = os.stat(name, dir_fd=directory, follow_symlinks=False)
    if stat.S_ISLNK(seen.st_mode):
        raise OSError(errno.ELOOP, "a symlink, never followed", str(path))
    if not stat.S_ISREG(seen.st_mode):  # a FIFO, socket or device is not even opened
        raise OSError(errno.ENOENT, "not a regular file", str(path))
    fd = os.open(name, READ_FLAGS, dir_fd=directory)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
        os.close(fd)
        raise OSError(errno.ENOENT, "not a regular file", str(path))
    if single_link and st.st_nlink > 1:
        os.close(fd)
        raise OSError(
            errno.EMLINK, f"a hard link ({st.st_nlink} links): another name may lie anywhere", str(path)
        )
    return fd, st


def open_regular(path: Path, root: Base | None = None, *, single_link: bool = False) -> int:
    """An fd reading the regular file ``path``, reached from ``root`` without following symlinks.

    ``root`` defaults to ``path``'s directory (only the file itself is then checked).
    Raises OSError: ELOOP when the file is a symlink, ENOTDIR when a directory on the way
    is one, ENOENT when it is missing or not a regular file (a FIFO, socket or device),
    and with ``single_link`` EMLINK when it has more than one hard link.
    """
    base = path.parent if root is None else root
    parts = _components(path, base)
    directory = _directory(base, parts[:-1])
    try:
        return _open_in(directory, parts[-1], path, single_link)[0]
    finally:
        os.close(directory)


class Opener:
    """``open_regular`` for many files under one root, keeping the directories it walked open.

    Files of a few directories (a checkpoint's shards, its ``rank*/`` folders) then cost one
    ``openat`` each, as plain opens do. A context manager: the directories are closed at exit.
    """

    #: Directories kept open at once, the most recently used.
    MAX_DIRECTORIES = 64

    def __init__(self, root: Base, *, single_link: bool = False) -> None:
        self.root = root
        self.single_link = single_link
        self._dirs: OrderedDict[tuple[str, ...], int] = OrderedDict()

    def open(self, path: str | Path) -> int:
        """Like ``open_regular(path, root)`` (``path`` may be a string); raises the same OSError."""
        return self.open_stat(path)[0]

    def open_stat(self, path: str | Path) -> tuple[int, os.stat_result]:
        """``open``, and the open file's ``fstat`` (taken anyway, to check it)."""
        directory, name = self._enter(path)
        return _open_in(directory, name, path, self.single_link)

    def stat(self, path: str | Path) -> os.stat_result:
        """``lstat`` of ``path`` reached like ``open``, nothing opened (a symlink is itself).

        Raises OSError: ENOENT when it is missing, ENOTDIR when a directory on the way is a symlink.
        """
        directory, name = self._enter(path)
        return os.stat(name, dir_fd=directory, follow_symlinks=False)

    def _enter(self, path: str | Path) -> tuple[int, str]:
        """``path``'s directory, open (reached without a symlink), and its last name."""
        parts = _components(path, self.root)
        return self._directory(parts[:-1]), parts[-1]

    def _directory(self, parts: tuple[str, ...]) -> int:
        """The ``O_PATH`` fd of ``parts``, walked from its nearest open ancestor (or the root)."""
        depth = len(parts)
        while depth >= 0 and parts[:depth] not in self._dirs:
            depth -= 1
        if depth < 0:
            self._keep((), _directory(self.root, ()))
            depth = 0
        fd = self._dirs[parts[:depth]]
        self._dirs.move_to_end(parts[:depth])
        for end in range(depth + 1, len(parts) + 1):
            fd = os.open(parts[end - 1], _DIR_FLAGS, dir_fd=fd)
            self._keep(parts[:end], fd)
        return fd

    def _keep(self, parts: tuple[str, ...], fd: int) -> None:
        self._dirs[parts] = fd
        while len(self._dirs) > self.MAX_DIRECTORIES:
            os.close(self._dirs.popitem(last=False)[1])

    def close(self) -> None:
        """Close the directories kept open (idempotent)."""
        while self._dirs:
            os.close(self._dirs.popitem()[1])

    def __enter__(self) -> Opener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_regular(path: Path, limit: int, root: Base | None = None) -> bytes:
    """The first ``limit`` bytes of the regular file ``path`` (``open_regular``'s rules).

    Raises OSError like ``open_regular``, or EFBIG when the file is longer than ``limit``.
    """
    fd = open_regular(path, root)
    try:
        if os.fstat(fd).st_size > limit:
            raise OSError(errno.EFBIG, f"longer than {limit} bytes", str(path))
        chunks: list[bytes] = []
        remaining = limit
        while remaining > 0 and (chunk := os.read(fd, min(remaining, 1024 * 1024))):
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
