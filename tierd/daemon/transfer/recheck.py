"""Re-checking a replica's bytes against the checksums taken at first sight.

The one re-check tierd has: deletion runs it on a durable copy right before a delete, the
scrubber on every verified replica once per ``scrub.every``, and ``POST .../verify`` on
demand. ``checksum`` asks the tier to prove every file (an object store compares the
full-object CRC64NVME it validated on upload, and its size, or reads every byte back where
the tier says ``verify: readback``; a POSIX tier re-hashes every byte); ``size`` only
compares sizes (cheap on a parallel file system, and weaker).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from tierd.daemon.backends import Backend
from tierd.errors import IntegrityError, NotFound, TierdError

__all__ = [
    "BadFile",
    "CheckOutcome",
    "CheckResult",
    "FileRecord",
    "Recheck",
    "RecheckMode",
    "recheck_replica",
]

#: Files checked at once: HEADs on an object store are round trips, re-hashes are disk reads.
RECHECK_CONCURRENCY = 16

RecheckMode = Literal["checksum", "size"]
#: Awaited with a file's size before the file is checked (the scrubber's bandwidth cap).
Pay = Callable[[int], Awaitable[None]]


@dataclass(frozen=True)
class FileRecord:
    """A file as the catalog recorded it at first sight."""

    relpath: str
    size: int
    checksum: str


@dataclass(frozen=True)
class BadFile:
    """A file the re-check found ``missing`` or not matching (``mismatch``) what was recorded."""

    relpath: str
    problem: Literal["missing", "mismatch"]
    detail: str
    expected: str
    #: The checksum found, when the mismatch is one of checksums (None for sizes, missing files).
    actual: str | None = None

    def audit(self) -> dict[str, str | None]:
        """The file, expected and actual checksum, as the audit log records them."""
        return {
            "file": self.relpath,
            "problem": self.problem,
            "expected": self.expected,
            "actual": self.actual,
        }


@dataclass(frozen=True)
class Recheck:
    """The outcome: ``ok``, or the problems found (a missing file, a mismatch)."""

    ok: bool
    problem: str = ""
    #: True when the store itself could not answer (network, throttling): nothing is known.
    inconclusive: bool = False
    #: The bad files found (only the first, unless every file was asked for).
    bad: tuple[BadFile, ...] = ()

    @property
    def missing(self) -> bool:
        """Whether every bad file found is missing (rather than holding other bytes)."""
        return bool(self.bad) and all(b.problem == "missing" for b in self.bad)


#: What a replica's re-check found; ``gone``: the replica left (was deleted) while it was read;
#: ``skipped``: not checked (not verified, or on another node's own tier).
CheckResult = Literal["ok", "mismatch", "missing", "inconclusive", "gone", "skipped"]


@dataclass(frozen=True)
class CheckOutcome:
    """A replica's re-check as the scrubber and a verify call report it, on one tier."""

    tier: str
    result: CheckResult
    bad: tuple[BadFile, ...] = ()
    detail: str = ""


async def recheck_replica(
    backend: Backend,
    files: Sequence[FileRecord],
    mode: RecheckMode,
    *,
    every_file: bool = False,
    pay: Pay | None = None,
) -> Recheck:
    """Check the files of a replica on ``backend``: up to the first bad one, or ``every_file``.

    ``pay`` is awaited with each file's size before it is read. Raises nothing of its own:
    a store that cannot answer gives an ``inconclusive`` Recheck.
    """
    gate = asyncio.Semaphore(RECHECK_CONCURRENCY)
    bad: list[BadFile] = []

    async def one(record: FileRecord) -> None:
        async with gate:
            if pay is not None:
                await pay(record.size)
            try:
                await _check(backend, record, mode)
            except (NotFound, IntegrityError) as exc:
                bad.append(_bad_file(record, exc))
                if not every_file:
                    raise

    tasks = [asyncio.ensure_future(one(f)) for f in files]
    try:
        for next_done in asyncio.as_completed(tasks):
            await next_done
    except (NotFound, IntegrityError):
        pass  # recorded in ``bad``
    except TierdError as exc:
        return Recheck(False, f"{backend.name}: could not re-check: {exc}", inconclusive=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if not bad:
        return Recheck(True)
    bad.sort(key=lambda b: b.relpath)
    return Recheck(False, "; ".join(b.detail for b in bad), bad=tuple(bad))


def _bad_file(record: FileRecord, exc: NotFound | IntegrityError) -> BadFile:
    if isinstance(exc, NotFound):
        return BadFile(record.relpath, "missing", str(exc), record.checksum)
    return BadFile(record.relpath, "mismatch", str(exc), record.checksum, exc.actual)


async def _check(backend: Backend, record: FileRecord, mode: RecheckMode) -> None:
    where = backend.location(record.relpath)
    if mode == "checksum":
        info = await backend.verify(record.relpath, record.checksum)
    else:
        info = await backend.stat(record.relpath)
    if info.size != record.size:
        raise IntegrityError(f"{where}: holds {info.size} bytes, {record.size} recorded at first sight")
