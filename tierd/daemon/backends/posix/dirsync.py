"""Directory fsyncs, shared by the renames that happen while one is under way (group commit).

A rename is durable once its directory has been fsynced after it. When many files land
in one directory at once (a checkpoint of thousands of small files), each writer needing
its own directory fsync would queue them one after another; instead a writer asks for
"an fsync that started after my rename", and one fsync serves every writer that asked
before it began. Blocking: call through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

__all__ = ["DirectorySyncer", "fsync_dir", "sync_directory"]


def fsync_dir(path: Path) -> None:
    """Make a directory's entries durable (where the file system allows it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # some network file systems refuse directory fsync
            raise
    finally:
        os.close(fd)


class _Directory:
    """One directory's requests: ``asked`` counts them, ``synced`` is the last one covered."""

    def __init__(self) -> None:
        self.asked = 0
        self.synced = 0
        self.running = False
        self.users = 0


class DirectorySyncer:
    """Coalesces concurrent fsyncs of the same directory (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._dirs: dict[Path, _Directory] = {}
        self.fsyncs = 0  # how many directory fsyncs ran, for tests

    def sync(self, path: Path) -> None:
        """Return once an fsync of ``path`` that began after this call has succeeded.

        Raises the OSError of the fsync this caller ran itself; a caller whose leader
        failed tries again.
        """
        with self._cond:
            state = self._dirs.setdefault(path, _Directory())
            state.users += 1
            state.asked += 1
            ticket = state.asked
            try:
                while state.synced < ticket:
                    if state.running:
                        self._cond.wait()
                    else:
                        self._lead(path, state)
            finally:
                state.users -= 1
                if state.users == 0:
                    del self._dirs[path]

    def _lead(self, path: Path, state: _Directory) -> None:
        """Run one fsync for every request made so far (called and returning with the lock)."""
        state.running = True
        covers = state.asked
        done = False
        self._cond.release()
        try:
            fsync_dir(path)
            done = True
        finally:
            self._cond.acquire()
            state.running = False
            if done:
                state.synced = max(state.synced, covers)
                self.fsyncs += 1
            self._cond.notify_all()


_syncer = DirectorySyncer()


def sync_directory(path: Path) -> None:
    """Make every rename into ``path`` made before this call durable (see DirectorySyncer)."""
    _syncer.sync(path)
