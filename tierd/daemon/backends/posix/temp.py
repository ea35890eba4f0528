"""Temporary files of POSIX writes, and telling a killed write's leftovers from live ones.

A write fills ``.<name>.tierd-tmp-<random>`` beside its final name and renames it into
place. Its writer holds an exclusive ``flock`` on it, and this process keeps the set of
temporary files it is writing: a temporary file is abandoned when it is not ours and
nobody holds its lock (a killed process holds none). Where the file system refuses locks
it must also have gone ``ABANDONED_UNLOCKED`` seconds without a change. A lock taken by a
writer on another node is invisible where locks are node-local (Lustre's ``localflock``),
which is why a write only removes the leftovers of its own name (no two nodes write the
same file), while the periodic sweep removes only old ones. A hop starting removes the
leftovers of its own files' names at once, whatever their age (``remove_leftovers_of``):
its job's lease makes it the only writer of those names. It may keep the newest big one
of a name for its write to resume from (``TempFile.adopt``; ``posix.resume``).

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

from tierd.daemon.backends.posix.dirsync import fsync_dir, sync_directory

__all__ = [
    "ABANDONED_UNLOCKED",
    "TEMP_MARK",
    "TempFile",
    "discard_all",
    "fsync_dir",
    "is_temp_name",
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
_MAX_NAME_IN_TEMP = 200  # keeps the temporary name under NAME_MAX (255)
_LOCK_GRACE = 2.0  # a writer locks its temporary file right after creating it
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})

# The temporary files this process is writing (created and dropped on the I/O threads).
_live_temps: set[str] = set()
_live_lock = threading.Lock()


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of our temporary names."""
    return name.startswith(".") and TEMP_MARK in name


def temp_stem(final: Path) -> str:
    """What every temporary name of ``final`` starts with."""
    return f".{final.name[:_MAX_NAME_IN_TEMP]}{TEMP_MARK}"


def _makedirs_durable(root: Path, directory: Path) -> None:
    """Create missing directories below ``root``, fsyncing each new entry's parent."""
    missing: list[Path] = []
    while directory != root and not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        try:
            os.mkdir(new)
        except FileExistsError:
            continue
        fsync_dir(new.parent)


class TempFile:
    """A temporary file beside its final name, locked and known live while it is written."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def create(cls, root: Path, final: Path) -> TempFile:
        """Open a fresh temporary file; retries if a concurrent delete pruned the directory."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC  # RDWR: chunks are read back
        for attempt in range(3):
            path = final.parent / f"{temp_stem(final)}{secrets.token_hex(6)}"
            try:
                fd = os.open(path, flags, 0o644)
            except FileNotFoundError:
                if attempt == 2:
                    raise
                _makedirs_durable(root, final.parent)  # new, or pruned by a concurrent delete
                continue
            with _live_lock:
                _live_temps.add(str(path))
            temp = cls(fd, path)
            try:
                _try_lock(fd)  # a fresh file: only a lock-less file system refuses
            except BaseException:
                temp.discard()
                raise
            return temp
        raise AssertionError("unreachable")

    @classmethod
    def adopt(cls, path: Path) -> TempFile | None:
        """Take over an abandoned temporary file (opened read-write, locked, known live).

        None when it is gone, not a regular file, written by this process or locked by
        another, or on a file system without locks (no way to tell it is abandoned).
        Raises OSError on other failures to open it.
        """
        with _live_lock:
            if str(path) in _live_temps:
                return None
            _live_temps.add(str(path))
        temp = cls(-1, path)
        try:
            temp.fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            st = os.fstat(temp.fd)
            if stat.S_ISREG(st.st_mode) and _try_lock(temp.fd) and _still_named(path, st):
                return temp
        except (FileNotFoundError, IsADirectoryError):
            pass
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

    def _forget(self) -> None:
        with _live_lock:
            _live_temps.discard(str(self.path))

    def commit(self, final: Path) -> float:
        """Rename into place and fsync the directory; returns the final mtime."""
        mtime = os.fstat(self.fd).st_mtime  # a rename keeps it
        os.rename(self.path, final)
        self._forget()
        self._close()  # only now: the lock guarded the temporary name until it was gone
        sync_directory(final.parent)
        return mtime

    def park(self) -> None:
        """Close the descriptor but keep the file known live (staged for a later rename)."""
        self._close()

    def rename_into(self, final: Path) -> None:
        """Rename a parked file into place (its directory still to be fsynced)."""
        os.rename(self.path, final)
        self._forget()

    def discard(self) -> None:
        """Best-effort cleanup after a failed write."""
        with suppress(OSError):
            os.unlink(self.path)
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


def _still_named(path: Path, st: os.stat_result) -> bool:
    """Whether ``path`` still names the open file ``st`` describes (not unlinked meanwhile)."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return st.st_nlink > 0 and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _remove_if_abandoned(path: str, min_age: float, *, owned: bool = False) -> bool:
    """Unlink a temporary file that is abandoned and at least ``min_age`` seconds old.

    Without ``owned`` an unlocked file must also be older than the lock grace (or, where
    the file system has no locks, ``ABANDONED_UNLOCKED``): another process may have just
    created it. ``owned`` (the caller holds the lease on the file) waives that wait.
    """
    with _live_lock:
        if path in _live_temps:
            return False
    try:
        # Opened for writing: NFS emulates flock with fcntl locks, whose exclusive kind needs it.
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, IsADirectoryError):
        return False
    try:
        st = os.fstat(fd)
        locked = _try_lock(fd)
        needed = min_age if owned else max(min_age, _LOCK_GRACE if locked else ABANDONED_UNLOCKED)
        if locked is False or not stat.S_ISREG(st.st_mode) or time.time() - st.st_mtime <= needed:
            return False
        os.unlink(path)  # under our lock: no writer can take it meanwhile
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)


def temp_names_in(directory: Path) -> set[str]:
    """The temporary names in ``directory``; none when it is missing or unreadable."""
    try:
        return {name for name in os.listdir(directory) if is_temp_name(name)}
    except OSError:
        return set()  # the write itself will report a real problem


def remove_abandoned(directory: Path, names: Collection[str]) -> int:
    """Remove those of ``names`` whose writer is gone; best effort, never raises."""
    removed = 0
    for name in names:
        with suppress(OSError):
            removed += _remove_if_abandoned(os.path.join(directory, name), 0.0)
    return removed


def remove_leftovers_of(
    finals: Iterable[Path], keep_min_size: int | None = None
) -> tuple[int, dict[Path, set[str]], dict[Path, Path]]:
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
    directory exists but cannot be read.
    """
    by_dir: dict[Path, list[Path]] = {}
    for final in finals:
        by_dir.setdefault(final.parent, []).append(final)
    removed, left, kept = 0, {}, {}
    for directory, names in by_dir.items():
        try:
            present = {name for name in os.listdir(directory) if is_temp_name(name)}
        except FileNotFoundError:
            continue
        for final in names:
            stem = temp_stem(final)
            owned = len(final.name) <= _MAX_NAME_IN_TEMP
            mine = sorted(n for n in present if n.startswith(stem))
            if owned and keep_min_size is not None and (newest := _newest(directory, mine, keep_min_size)):
                kept[final] = directory / newest
                mine.remove(newest)
            for name in mine:
                if _remove_if_abandoned(os.path.join(directory, name), 0.0, owned=owned):
                    removed += 1
                    present.discard(name)
        left[directory] = present
    return removed, left, kept


def _newest(directory: Path, names: Iterable[str], min_size: int) -> str | None:
    """The most recently modified regular file of ``names`` holding ``min_size`` bytes or more."""
    best: tuple[float, str] | None = None
    for name in names:
        try:
            st = os.stat(directory / name, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size >= min_size and (best is None or st.st_mtime > best[0]):
            best = (st.st_mtime, name)
    return None if best is None else best[1]


def remove_owned_leftover(path: Path) -> bool:
    """Remove one abandoned temporary file of a name the caller holds the lease on, whatever its age.

    Best effort (never raises); whether it was removed.
    """
    with suppress(OSError):
        return _remove_if_abandoned(str(path), 0.0, owned=True)
    return False


def remove_stale_temps(root: Path, older_than: float) -> int:
    """Remove abandoned temporary files older than ``older_than`` seconds under ``root``.

    Raises OSError when a directory cannot be read or a file cannot be removed.
    """
    removed = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            if is_temp_name(name):
                removed += _remove_if_abandoned(os.path.join(dirpath, name), older_than)
    return removed
