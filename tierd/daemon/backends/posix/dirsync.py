"""Directory fsyncs, shared by the renames that happen while one is under way (group commit).

A rename is durable once its directory has been fsynced after it. When many files land
in one directory at once (a checkpoint of thousands of small files), each writer needing
its own directory fsync would queue them one after another; instead a writer asks for
"an fsync that started after my rename", and one fsync serves every writer that asked
before it began. Directories are open ``Dir``s (``tierd.daemon.beneath``), never paths.
Blocking: call through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tierd.daemon.beneath import Dir

__all__ = ["DirectorySyncer", "sync_directory"]


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

    def sync(self, directory: Dir) -> None:
        """Return once an fsync of ``directory`` that began after this call has succeeded.

        Raises the OSError of the fsync this caller ran itself; a caller whose leader
        failed tries again.
        """
        with self._cond:
            state = self._dirs.setdefault(directory.path, _Directory())
            state.users += 1
            state.asked += 1
            ticket = state.asked
            try:
                while state.synced < ticket:
                    if state.running:
                        self._cond.wait()
                    else:
                        self._lead(directory, state)
            finally:
                state.users -= 1
                if state.users == 0:
                    del self._dirs[directory.path]

    def _lead(self, directory: Dir, state: _Directory) -> None:
        """Run one fsync for every request made so far (called and returning with the lock)."""
        state.running = True
        covers = state.asked
        done = False
        self._cond.release()
        try:
            directory.fsync()
            done = True
        finally:
            self._cond.acquire()
            state.running = False
            if done:
                state.synced = max(state.synced, covers)
                self.fsyncs += 1
            self._cond.notify_all()


_syncer = DirectorySyncer()


def sync_directory(directory: Dir) -> None:
    """Make every rename into ``directory`` made before this call durable (see DirectorySyncer)."""
    _syncer.sync(directory)
