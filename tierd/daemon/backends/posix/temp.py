"""Temporary files of POSIX writes, and telling a killed write's leftovers from live ones.

A write fills ``.<name>.tierd-tmp-<random>`` beside its final name and renames it into
place (a small file staged for a batch has no name at all where the file system allows it:
``posix.unnamed``, a ``TempFile`` too). Its writer holds an exclusive ``flock`` on it while
filling it (a small file staged for a batch under a temporary name, parked at once, takes
none: ``TempFile.park`` says what keeps a parked file), and this process keeps the set of
temporary files it is writing: a temporary file is abandoned when it is not ours and nobody
holds its lock (a killed process holds none). Where the file
system refuses locks it must also have gone ``ABANDONED_UNLOCKED`` seconds without a change. A lock taken by a
writer on another node is invisible where locks are node-local (Lustre's ``localflock``),
which is why a write only removes the leftovers of its own name (no two nodes write the
same file), while the periodic sweep removes only old ones. A hop starting removes the
leftovers of its own files' names at once, whatever their age (``remove_leftovers_of``):
its job's lease makes it the only writer of those names. It may keep the newest big one
of a name for its write to resume from (``TempFile.adopt``; ``posix.resume``).

Every name is reached through a directory descriptor (``tierd.daemon.beneath``): nothing
here follows a symlink below the tier's root, and the temporary file is created ``0600``.
Every function here blocks: call them through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import threading
import time
from collections.abc import Collection, Iterable
from contextlib import suppress
from pathlib import Path

from tierd.daemon.backends.base import Ownership
from tierd.daemon.backends.posix.dirsync import sync_directory
from tierd.daemon.backends.posix.owner import apply_to_fd
from tierd.daemon.beneath import Dir, Place, Root, umask, walk

__all__ = [
    "ABANDONED_UNLOCKED",
    "DEFAULT_FILE_MODE",
    "TEMP_MARK",
    "TempFile",
    "discard_all",
    "is_temp_name",
    "random_suffix",
    "remove_abandoned",
    "remove_leftovers_of",
    "remove_owned_leftover",
    "remove_stale_temps",
    "temp_names_in",
    "temp_stem",
]

TEMP_MARK = ".tierd-tmp-"
#: Without locks, how long a temporary file must have gone unmodified to count as abandoned.
ABANDONED_UNLOCKED = 3600.0
#: A copy's mode when nothing was recorded of its source's (the umask applies).
DEFAULT_FILE_MODE = 0o644
_MAX_NAME_IN_TEMP = 200  # keeps the temporary name under NAME_MAX (255)
_LOCK_GRACE = 2.0  # a writer locks its temporary file right after creating it
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_UMASK = umask()

# The temporary files this process is writing (created and dropped on the I/O threads), by ``_key``.
_live_temps: set[str] = set()
_live_lock = threading.Lock()


class _Suffixes(threading.local):
    """Random bytes for temporary names, drawn from the kernel 4 KiB at a time per thread."""

    def __init__(self) -> None:
        self.pool = b""
        self.used = 0


_suffixes = _Suffixes()


def random_suffix() -> str:
    """12 random hex digits (``secrets.token_hex(6)``, without a ``getrandom`` call per file)."""
    pool = _suffixes
    if pool.used + 6 > len(pool.pool):
        pool.pool, pool.used = secrets.token_bytes(4092), 0
    pool.used += 6
    return pool.pool[pool.used - 6 : pool.used].hex()


def _key(directory: Dir, name: str) -> str:
    """The whole path of ``name`` in ``directory``, a string for the live set (no ``Path`` joined)."""
    return f"{directory.path}/{name}"


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of our temporary names."""
    return name.startswith(".") and TEMP_MARK in name


def temp_stem(final_name: str) -> str:
    """What every temporary name of the file ``final_name`` starts with."""
    return f".{final_name[:_MAX_NAME_IN_TEMP]}{TEMP_MARK}"


class TempFile:
    """A temporary file beside its final name, locked and known live while it is written.

    It is created ``0600`` and gets its final owner and mode (``posix.owner``: the ones
    recorded at first sight, else ``DEFAULT_FILE_MODE``) just before it is renamed into place
    or parked: a copy is never more readable than its source, not even for a moment.
    """

    def __init__(self, fd: int, directory: Dir, name: str, owner: Ownership | None = None) -> None:
        self.fd = fd
        self.dir = directory
        self.name = name
        self.owner = owner
        self.key = _key(directory, name)

    @property
    def path(self) -> Path:
        """The whole path, for messages and keys only."""
        return self.dir.path / self.name

    @classmethod
    def create(cls, final: Place, owner: Ownership | None = None, *, lock: bool = True) -> TempFile:
        """Open a fresh temporary file beside ``final``, making its directories if missing.

        Without ``lock`` no ``flock`` is taken: for a file parked at once (``park`` drops the
        lock anyway), which the live set and the age rules keep, as they keep every parked
        file (see ``park``). Walks again (once, twice) if a concurrent delete removed the
        directory. Raises OSError: ENOENT when the root is missing, ENOTDIR when a symlink is
        on the way.
        """
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW  # RDWR: chunks read back
        for attempt in range(3):
            directory = final.dir(create=True)
            name = f"{temp_stem(final.name)}{random_suffix()}"
            try:
                fd = os.open(name, flags, 0o600, dir_fd=directory.fd)
            except FileNotFoundError:  # the directory was removed since it was opened
                final.root.forget(final.parts)
                if attempt == 2:
                    raise
                continue
            temp = cls(fd, directory, name, owner)
            with _live_lock:
                _live_temps.add(temp.key)
            if not lock:
                return temp
            try:
                _try_lock(fd)  # a fresh file: only a lock-less file system refuses
            except BaseException:
                temp.discard()
                raise
            return temp
        raise AssertionError("unreachable")

    @classmethod
    def adopt(cls, directory: Dir, name: str) -> TempFile | None:
        """Take over an abandoned temporary file (opened read-write, locked, known live).

        None when it is gone, not a regular file, written by this process or locked by
        another, or on a file system without locks (no way to tell it is abandoned).
        Raises OSError on other failures to open it.
        """
        temp = cls(-1, directory, name)
        key = temp.key
        with _live_lock:
            if key in _live_temps:
                return None
            _live_temps.add(key)
        try:
            temp.fd = os.open(name, os.O_RDWR | _OPEN_FLAGS, dir_fd=directory.fd)
            st = os.fstat(temp.fd)
            if stat.S_ISREG(st.st_mode) and _try_lock(temp.fd) and _still_named(directory, name, st):
                os.fchmod(temp.fd, 0o600)  # a killed older writer's may have been wider
                return temp
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            pass
        except OSError as exc:
            if exc.errno != errno.ELOOP:  # a symlink under our temporary name
                temp._forget()
                temp._close()
                raise
        except BaseException:
            temp._forget()
            temp._close()
            raise
        temp._forget()
        temp._close()
        return None

    def _close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def mark_live(self) -> None:
        """Count it among the files this process is writing: no removal here touches it."""
        with _live_lock:
            _live_temps.add(self.key)

    def _forget(self) -> None:
        with _live_lock:
            _live_temps.discard(self.key)

    def _finish(self) -> None:
        """Give the file its recorded owner and mode, or the default mode when none was recorded."""
        if self.owner is not None:
            apply_to_fd(self.fd, self.owner)
        else:
            os.fchmod(self.fd, DEFAULT_FILE_MODE & ~_UMASK)

    def commit(self, final: Place) -> float:
        """Give it its final mode, rename into place and fsync the directory; returns the final mtime."""
        self._finish()
        mtime = os.fstat(self.fd).st_mtime  # a rename keeps it
        self._rename(final)
        self._close()  # only now: the lock guarded the temporary name until it was gone
        sync_directory(self.dir)
        return mtime

    def park(self) -> None:
        """Give it its final mode, close the descriptor, keep the file known live (renamed later).

        Closing drops the lock: until its rename a parked file is kept by this process's
        live set (every removal here checks it first), and from other processes by the age
        rules (a fresh unlocked file is older than ``_LOCK_GRACE`` at the earliest, the
        sweep's ages are far longer) and by the leases (only the lease holder removes a
        name's leftovers whatever their age).
        """
        self._finish()
        self._close()

    def fsync_parked(self) -> None:
        """Fsync a parked file (reopened by name in its directory, never through a symlink)."""
        fd = os.open(self.name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=self.dir.fd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename_into(self, final: Place) -> None:
        """Rename a parked file into place (its directory still to be fsynced)."""
        self._rename(final)

    def _rename(self, final: Place) -> None:
        os.rename(self.name, final.name, src_dir_fd=self.dir.fd, dst_dir_fd=self.dir.fd)
        self._forget()

    def open_direct(self, flags: int) -> int:
        """Open the file again with ``flags`` (``O_DIRECT``) by name in its directory."""
        return os.open(self.name, os.O_WRONLY | _OPEN_FLAGS | flags, dir_fd=self.dir.fd)

    def discard(self) -> None:
        """Best-effort cleanup after a failed write."""
        with suppress(OSError):
            os.unlink(self.name, dir_fd=self.dir.fd)
        self._forget()
        with suppress(OSError):
            self._close()


def discard_all(temps: Iterable[TempFile]) -> None:
    """``TempFile.discard`` each one (best effort)."""
    for temp in temps:
        temp.discard()


def _try_lock(fd: int) -> bool | None:
    """Take an exclusive ``flock`` without waiting.

    True if taken, False if another open file holds it, None where the file system has
    no locks.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in _NO_LOCKS:
            return None
        raise
    return True


def _still_named(directory: Dir, name: str, st: os.stat_result) -> bool:
    """Whether ``name`` still names the open file ``st`` describes (not unlinked meanwhile)."""
    try:
        now = os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return st.st_nlink > 0 and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _remove_if_abandoned(directory: Dir, name: str, min_age: float, *, owned: bool = False) -> bool:
    """Unlink a temporary file that is abandoned and at least ``min_age`` seconds old.

    Without ``owned`` an unlocked file must also be older than the lock grace (or, where
    the file system has no locks, ``ABANDONED_UNLOCKED``): another process may have just
    created it. ``owned`` (the caller holds the lease on the file) waives that wait. A
    symlink or anything but a regular file under a temporary name is left alone.
    """
    with _live_lock:
        if _key(directory, name) in _live_temps:
            return False
    try:
        # Opened for writing: NFS emulates flock with fcntl locks, whose exclusive kind needs it.
        fd = os.open(name, os.O_WRONLY | _OPEN_FLAGS, dir_fd=directory.fd)
    except (FileNotFoundError, IsADirectoryError):
        return False
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symlink, or a FIFO with no reader
            return False
        raise
    try:
        st = os.fstat(fd)
        locked = _try_lock(fd)
        needed = min_age if owned else max(min_age, _LOCK_GRACE if locked else ABANDONED_UNLOCKED)
        if locked is False or not stat.S_ISREG(st.st_mode) or time.time() - st.st_mtime <= needed:
            return False
        if not _still_named(directory, name, st):
            return False
        os.unlink(name, dir_fd=directory.fd)  # under our lock: no writer can take it meanwhile
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)


def temp_names_in(directory: Dir) -> set[str]:
    """The temporary names in ``directory``; none when it is unreadable."""
    try:
        return {name for name in os.listdir(directory.fd) if is_temp_name(name)}
    except OSError:
        return set()  # the write itself will report a real problem


def remove_abandoned(directory: Dir, names: Collection[str]) -> int:
    """Remove those of ``names`` whose writer is gone; best effort, never raises."""
    removed = 0
    for name in names:
        with suppress(OSError):
            removed += _remove_if_abandoned(directory, name, 0.0)
    return removed


def remove_leftovers_of(
    finals: Iterable[Place], keep_min_size: int | None = None
) -> tuple[int, dict[tuple[str, ...], set[str]], dict[Place, tuple[Dir, str]]]:
    """Remove the abandoned temporary files of exactly these final names, whatever their age.

    For a hop starting: its job's lease makes it the only writer of these names, so an
    unlocked temporary file of one of them is a killed attempt's, however young; one this
    process is writing, or another holds locked, is kept. A name cut in its temporary
    names (over 200 characters) may share them with another file, so its leftovers keep
    the usual age rules. Other names' temporary files are never touched: another daemon
    may be writing them into the same directory. With ``keep_min_size``, the newest
    temporary file of a (not cut) name holding at least that many bytes is left in place
    for the write to resume from. Returns how many were removed, per directory listed the
    temporary names left in it, and the kept files by final name. Raises OSError when a
    directory exists but cannot be read, or has a symlink on its way.
    """
    by_dir: dict[tuple[str, ...], list[Place]] = {}
    root: Root | None = None
    for final in finals:
        root = final.root
        by_dir.setdefault(final.parts, []).append(final)
    removed, left, kept = 0, {}, {}
    for parts, names in by_dir.items():
        assert root is not None
        try:
            directory = root.open(parts)
        except FileNotFoundError:
            continue
        with directory:
            present = {name for name in os.listdir(directory.fd) if is_temp_name(name)}
            for final in names:
                stem = temp_stem(final.name)
                owned = len(final.name) <= _MAX_NAME_IN_TEMP
                mine = sorted(n for n in present if n.startswith(stem))
                newest = _newest(directory, mine, keep_min_size) if owned and keep_min_size else None
                if newest is not None:
                    kept[final] = (final.dir(), newest)
                    mine.remove(newest)
                for name in mine:
                    if _remove_if_abandoned(directory, name, 0.0, owned=owned):
                        removed += 1
                        present.discard(name)
        left[parts] = present
    return removed, left, kept


def _newest(directory: Dir, names: Iterable[str], min_size: int) -> str | None:
    """The most recently modified regular file of ``names`` holding ``min_size`` bytes or more."""
    best: tuple[float, str] | None = None
    for name in names:
        try:
            st = os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size >= min_size and (best is None or st.st_mtime > best[0]):
            best = (st.st_mtime, name)
    return None if best is None else best[1]


def remove_owned_leftover(directory: Dir, name: str) -> bool:
    """Remove one abandoned temporary file of a name the caller holds the lease on, whatever its age.

    Best effort (never raises); whether it was removed.
    """
    with suppress(OSError):
        return _remove_if_abandoned(directory, name, 0.0, owned=True)
    return False


def remove_stale_temps(root: Root, older_than: float, *, owned: bool = False) -> int:
    """Remove abandoned temporary files older than ``older_than`` seconds under ``root``.

    Walks by directory descriptors (a symlinked directory is never entered). ``owned``: only
    this process writes under ``root`` (a peer directory), so an unlocked file is abandoned
    whatever its age. Raises OSError when a directory cannot be read or a file cannot be removed.
    """
    removed = 0
    with root.open() as top:
        for _, directory, entries in walk(top):
            for entry in entries:
                if is_temp_name(entry.name) and entry.is_file(follow_symlinks=False):
                    removed += _remove_if_abandoned(directory, entry.name, older_than, owned=owned)
    return removed
