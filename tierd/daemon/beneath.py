"""Directory trees tierd writes into, reached only through directory descriptors.

tierd runs as root, and training jobs write tier 0 and restore targets: a directory there can
be swapped for a symlink (to ``/etc``) at any moment. So nothing below a tree's top is ever
named by a whole path. A ``Root`` opens its anchor once per operation (the operator's
configured directory, which may be reached through symlinks), walks each component below it
with ``openat(O_NOFOLLOW | O_DIRECTORY)``, and every create, rename, unlink, mkdir and listing
is then made relative to the directory descriptor it ends on (``*at`` calls). A symlink at any
component fails the walk (ELOOP, or ENOTDIR), so it cannot lead outside, whatever is swapped
in and when; ``..`` and empty components are refused before any call. This is the model of
Go's ``os.Root`` and systemd's ``chase()``. As with ``os.Root``, a directory that is *moved*
while open is followed to where it went, which a job can only do inside a file system it can
write.

A restore target is a ``Root`` anchored at the allowed root it lies in, with the target's
components below it walked like any other (``Root(anchor, below)``): swapping a component of
the target for a symlink between the check and the copy leads nowhere.

Writes keep the directories they use open in a small cache (``Root.dir``): a checkpoint of
thousands of small files then costs one ``openat`` a file, as a plain open does. Code that
removes or renames a directory calls ``Root.forget``; a create that finds its cached
directory deleted (ENOENT) forgets it and walks again. Every function blocks: call it through
``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DIR_FLAGS",
    "Dir",
    "Place",
    "Root",
    "default_dir_mode",
    "split_relpath",
    "umask",
    "walk",
]

#: How a directory below a root is opened: readable (for fsync and listing), never a symlink.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ANCHOR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_CACHED_DIRS = 64


def umask() -> int:
    """The process's umask, read without changing it (``os.umask`` would race other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def default_dir_mode() -> int:
    """The mode a directory tierd creates gets when no recorded mode says otherwise."""
    return 0o777 & ~umask()


def split_relpath(relpath: str) -> tuple[tuple[str, ...], str]:
    """``("a", "b"), "c"`` for ``a/b/c``; raises OSError(EINVAL) for an empty, ``.`` or ``..`` name."""
    parts = tuple(relpath.split("/"))
    check_names(parts, relpath)
    return parts[:-1], parts[-1]


def check_names(parts: Sequence[str], where: str) -> None:
    """Raise OSError(EINVAL) unless every one of ``parts`` is a plain file name."""
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\0" in part:
            raise OSError(errno.EINVAL, "not a plain name below the root", where)


class Dir:
    """An open directory: its descriptor, and the path it was reached by (for messages only).

    The descriptor is closed by ``close`` or once nothing refers to the ``Dir`` any more.
    """

    __slots__ = ("__weakref__", "_closer", "fd", "path")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self._closer = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        self._closer()

    def fsync(self) -> None:
        """Make the directory's entries durable (where the file system allows it)."""
        try:
            os.fsync(self.fd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # some network file systems refuse directory fsync
                raise

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_child(parent: int, name: str, where: Path) -> int:
    """``name`` in ``parent`` as a directory; OSError(ENOTDIR) when it is a symlink or not a directory."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if _is_symlink(parent, name):
            raise OSError(errno.ENOTDIR, "a symlink, never followed", str(where)) from None
        raise


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _make_child(parent: int, name: str) -> bool:
    """Make the directory ``name`` in ``parent``, owner-only (0700); False when it was there.

    The parent is fsynced so the new entry is durable. Its final owner and mode come after
    (``Root.made``): never wider than them for a moment.
    """
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        return False
    try:
        os.fsync(parent)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    return True


#: What gives a directory a Root made its owner and mode: called with its components below the
#: top (``()``: the top itself; None: a directory above the top) and its open descriptor.
Made = Callable[[tuple[str, ...] | None, int], None]


class Root:
    """A directory tree whose entries are reached only through descriptors (see the module docstring).

    ``anchor`` is opened by path (the operator's configuration); ``below`` are components
    walked from it without following symlinks (a restore target inside an allowed root).
    """

    def __init__(self, anchor: Path, below: Sequence[str] = (), *, dir_mode: int | None = None) -> None:
        check_names(below, str(anchor.joinpath(*below)))
        self.anchor = anchor
        self.below = tuple(below)
        self.top = anchor.joinpath(*self.below)
        self.dir_mode = default_dir_mode() if dir_mode is None else dir_mode
        #: Gives each directory this Root makes its owner and mode (by default: ``dir_mode``).
        self.made: Made = self._default_made
        self._dirs: OrderedDict[tuple[str, ...], Dir] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Root({str(self.top)!r})"

    def exists(self) -> bool:
        """Whether the top is a directory reachable without a symlink below the anchor."""
        try:
            self.open().close()
        except OSError:
            return False
        return True

    def open(self, parts: Sequence[str] = (), *, create: bool = False, create_top: bool = False) -> Dir:
        """A fresh ``Dir`` of ``top/parts...``; the caller closes it.

        ``create`` makes missing directories below the top; ``create_top`` also those of
        ``below`` (never the anchor itself: an unmounted tier is not recreated). Raises
        OSError: ENOENT when something is missing (the anchor: not mounted?), ENOTDIR when a
        component is a symlink or a file, EINVAL for a name that is not plain.
        """
        check_names(parts, str(self.top.joinpath(*parts)))
        fd = os.open(self.anchor, _ANCHOR_FLAGS)
        depth = len(self.below)
        try:
            path = self.anchor
            for index, name in enumerate((*self.below, *parts)):
                path = path / name
                below = tuple(parts[: index - depth + 1]) if index >= depth - 1 else None
                child = self._step(fd, name, path, create_top if index < depth else create, below)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return Dir(fd, self.top.joinpath(*parts))

    def _step(self, fd: int, name: str, path: Path, create: bool, below: tuple[str, ...] | None) -> int:
        """The descriptor of ``name`` below ``fd``, made first if missing and ``create``."""
        try:
            return _open_child(fd, name, path)
        except FileNotFoundError:
            if not create:
                raise
        made = _make_child(fd, name)
        child = _open_child(fd, name, path)
        if made:
            try:
                self.made(below, child)
            except BaseException:
                os.close(child)
                raise
        return child

    def _default_made(self, below: tuple[str, ...] | None, fd: int) -> None:
        os.fchmod(fd, self.dir_mode)

    def dir(self, parts: Sequence[str], *, create: bool = False) -> Dir:
        """``open(parts)``, kept open for the next caller (do not close it; see ``forget``)."""
        key = tuple(parts)
        with self._lock:
            found = self._dirs.get(key)
            if found is not None:
                self._dirs.move_to_end(key)
                return found
        opened = self.open(key, create=create)
        with self._lock:
            self._dirs[key] = opened
            self._dirs.move_to_end(key)
            while len(self._dirs) > _CACHED_DIRS:
                self._dirs.popitem(last=False)
        return opened

    def forget(self, parts: Sequence[str] = ()) -> None:
        """Drop cached directories at or below ``parts`` (after removing or renaming them)."""
        prefix = tuple(parts)
        with self._lock:
            for key in [k for k in self._dirs if k[: len(prefix)] == prefix]:
                del self._dirs[key]

    def place(self, relpath: str) -> Place:
        """Where the file ``relpath`` (below the top) lives. Raises OSError(EINVAL) for a bad name."""
        parts, name = split_relpath(relpath)
        return Place(self, parts, name)

    def relparts(self, path: Path) -> tuple[str, ...]:
        """``path``'s components below the top. Raises OSError(EXDEV) when it is not below it."""
        text, base = os.fspath(path), os.fspath(self.top).rstrip("/")
        if text == base:
            return ()
        if not text.startswith(base + "/"):
            raise OSError(errno.EXDEV, f"not under {self.top}", text)
        parts = tuple(text[len(base) + 1 :].split("/"))
        check_names(parts, text)
        return parts


@dataclass(frozen=True, eq=False)
class Place:
    """A file's directory (components below a root's top) and its name there."""

    root: Root
    parts: tuple[str, ...]
    name: str

    @property
    def path(self) -> Path:
        """The whole path, for messages and keys only: never handed to the kernel."""
        return self.root.top.joinpath(*self.parts, self.name)

    def dir(self, *, create: bool = False) -> Dir:
        """The directory holding the file (cached, see ``Root.dir``)."""
        return self.root.dir(self.parts, create=create)

    def __hash__(self) -> int:
        return hash((id(self.root), self.parts, self.name))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Place)
            and other.root is self.root
            and (other.parts, other.name) == (self.parts, self.name)
        )


def walk(top: Dir) -> Iterator[tuple[tuple[str, ...], Dir, list[os.DirEntry[str]]]]:
    """Every directory below ``top`` (itself first): its components, an open ``Dir``, its entries.

    Depth first, in name order. A subdirectory is opened from its parent's descriptor, without
    following a symlink, only when the walk comes to it: a directory's ``Dir`` stays open while
    subdirectories of it are still to be walked, so a walk holds about one descriptor per level,
    however wide the tree. A symlink is listed as the entry it is, never entered. Raises OSError
    when a directory cannot be opened or read (the caller decides whether that ends its walk).
    """
    stack: list[tuple[tuple[str, ...], Dir | None]] = [((), None)]
    while stack:
        parts, parent = stack.pop()
        if parent is None:
            here = top
        else:
            try:
                here = Dir(
                    _open_child(parent.fd, parts[-1], parent.path / parts[-1]), parent.path / parts[-1]
                )
            except FileNotFoundError:
                continue  # removed meanwhile
        parent = None  # closed (by its finalizer) once its last pending child is opened
        with os.scandir(here.fd) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        yield parts, here, entries
        below = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        stack.extend(((*parts, name), here) for name in reversed(below))


def lstat_in(directory: Dir, name: str) -> os.stat_result | None:
    """``lstat`` of ``name`` in ``directory``; None when it is missing."""
    try:
        return os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def is_regular(st: os.stat_result | None) -> bool:
    """Whether ``st`` describes a regular file."""
    return st is not None and stat.S_ISREG(st.st_mode)
