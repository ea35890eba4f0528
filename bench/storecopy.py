"""An object-store bench's tierd side: the transfer layer a hop and a restore run, timed inside.

``copy_files`` copies a checkpoint's files between two backends with a ``FileCopier`` through
``transfer.copyset.copy_checkpoint_files`` (small files in groups, the marker last), every
file checked against its first-sight CRC64NVME, and times it from its first request to its
last file verified: a running daemon has its imports done, so a worker process's start-up
(Python and the SDKs, seconds of CPU on a loaded 2-core machine) is not tierd's copy, and a
POSIX destination has chosen its ``io_mode`` before the timer starts, as a daemon has. Used by
``bench_azure`` and ``bench_gcs``.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tierd.config import AnyTier
from tierd.daemon.backends import Backend, ObjectInfo, PosixBackend
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.transfer.copier import FileCopier
from tierd.daemon.transfer.copyset import GROUP_FILE_LIMIT, copy_checkpoint_files
from tierd.daemon.transfer.spec import FileSpec
from tierd.daemon.transfer.throttle import PriorityPool

__all__ = ["EmulatorCpu", "copy_files", "process_cpu", "worker_env"]

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (0.0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def worker_env() -> dict[str, str]:
    """This environment with glibc's arenas capped, as the systemd unit and the image cap them."""
    return {**os.environ, "MALLOC_ARENA_MAX": "2"}


class EmulatorCpu:
    """The emulator's CPU seconds while one side ran: ``with EmulatorCpu(pid) as cpu: ...; cpu.seconds``."""

    def __init__(self, pid: int) -> None:
        self.pid, self.seconds = pid, 0.0

    def __enter__(self) -> EmulatorCpu:
        self._start = process_cpu(self.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = round(process_cpu(self.pid) - self._start, 3)


async def _io_mode_chosen(dst: Backend, files: Sequence[FileSpec]) -> None:
    """Let a POSIX destination choose its ``io_mode`` before the copy is timed.

    With ``io_mode: auto`` the first big file's write probes the file system (96 MiB written
    and synced, ``posix.iomode``); a running daemon has done that once an hour, not per copy,
    and a 64 MiB download paid more for the probe than for its bytes.
    """
    if isinstance(dst, PosixBackend) and any(f.size > GROUP_FILE_LIMIT for f in files):
        await dst.io_mode.direct(dst.tree, dst.budget, dst.chunk_size)


async def copy_files(
    src: Backend, dst: Backend, tier: AnyTier, entries: Sequence[Sequence[Any]]
) -> dict[str, Any]:
    """Copy ``entries`` (relpath, size, checksum, mtime_ns) from ``src`` to ``dst``; closes both.

    ``tier`` is the tier whose ``concurrency`` and ``verify`` a hop would use (the
    destination's on upload, the store's on download). Returns files, seconds and CPU seconds.
    """
    options = PipelineOptions()
    batch = dst.batch()
    copier = FileCopier(
        src=src,
        dst=dst,
        slots=PriorityPool(tier.concurrency),
        priority=0,
        resume=None,
        bucket=None,
        readback=tier.verify == "readback",
        backoff=options.file_backoff,
        attempts=options.file_attempts,
        integrity_attempts=options.integrity_attempts,
        batch=batch,
    )
    files = [FileSpec(*entry) for entry in entries]
    verified = 0

    def done(file: FileSpec, info: ObjectInfo | None) -> None:
        nonlocal verified
        if info is None or info.checksum != file.checksum or info.verified_by is None:
            raise RuntimeError(f"{file.relpath}: not verified ({info})")
        verified += 1

    await _io_mode_chosen(dst, files)
    gc.freeze()
    started, before = time.perf_counter(), os.times()
    try:
        await copy_checkpoint_files(copier, batch, files, concurrency=tier.concurrency, done=done)
        seconds, after = time.perf_counter() - started, os.times()
    finally:
        await src.close()
        await dst.close()
    if verified != len(files):
        raise RuntimeError(f"{verified} of {len(files)} files reported verified")
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"files": verified, "seconds": seconds, "cpu_seconds": cpu}
