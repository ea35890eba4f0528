"""Re-checking a replica's bytes against the checksums taken at first sight.

Deletion trusts a durable copy only after re-checking it right before the delete:
``checksum`` asks the tier to prove every file (an object store compares the full-object
CRC64NVME it validated on upload, and its size; a POSIX tier re-hashes every byte);
``size`` only compares sizes (cheap on a parallel file system, and weaker).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tierd.daemon.backends import Backend
from tierd.errors import IntegrityError, NotFound, TierdError

__all__ = ["FileRecord", "Recheck", "recheck_replica"]

#: Files checked at once: HEADs on an object store are round trips, re-hashes are disk reads.
RECHECK_CONCURRENCY = 16

RecheckMode = Literal["checksum", "size"]


@dataclass(frozen=True)
class FileRecord:
    """A file as the catalog recorded it at first sight."""

    relpath: str
    size: int
    checksum: str


@dataclass(frozen=True)
class Recheck:
    """The outcome: ``ok``, or the first problem found (a missing file, a mismatch)."""

    ok: bool
    problem: str = ""
    #: True when the store itself could not answer (network, throttling): nothing is known.
    inconclusive: bool = False


async def recheck_replica(backend: Backend, files: Sequence[FileRecord], mode: RecheckMode) -> Recheck:
    """Check every file of a replica on ``backend``; stops at the first bad one."""
    gate = asyncio.Semaphore(RECHECK_CONCURRENCY)

    async def one(record: FileRecord) -> None:
        async with gate:
            await _check(backend, record, mode)

    tasks = [asyncio.ensure_future(one(f)) for f in files]
    try:
        for next_done in asyncio.as_completed(tasks):
            await next_done
    except (NotFound, IntegrityError) as exc:
        return Recheck(False, str(exc))
    except TierdError as exc:
        return Recheck(False, f"{backend.name}: could not re-check: {exc}", inconclusive=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return Recheck(True)


async def _check(backend: Backend, record: FileRecord, mode: RecheckMode) -> None:
    where = backend.location(record.relpath)
    if mode == "checksum":
        info = await backend.verify(record.relpath, record.checksum)
    else:
        info = await backend.stat(record.relpath)
    if info.size != record.size:
        raise IntegrityError(f"{where}: holds {info.size} bytes, {record.size} recorded at first sight")
