"""How a POSIX tier writes big files: by ``O_DIRECT`` or through the page cache, chosen by measuring.

Which is faster depends on the file system and the device under it, not on a rule. An
``O_DIRECT`` write hands the buffer's physical pages to the device as they lie, one
segment each, and a request holds at most the queue's ``max_segments``: from 4 KiB pages
requests stay under ~1 MiB while the page cache (large folios) sends the queue's 4 MiB, and
on this project's virtio disks that made a 4 GiB hop take 2x ``cp`` + ``sync``; from the
budget's huge-page buffers (``budget.HUGE_PAGE``) it is ahead of it, at half ``cp``'s CPU. A
network file system may take the page cache's big, late writes better still. So a tier's
``io_mode`` (its config) is ``direct``, ``buffered`` or, by default, ``auto``: the first write
of a big file into a file system probes it with the write path itself (``probe``:
``hash_and_pwrite`` of ``PROBE_BYTES`` from the same budgeted buffers, then ``fsync``, each
way ``PROBE_ROUNDS`` times in turn) and ``choose`` takes ``O_DIRECT`` unless the page cache
was faster by ``DIRECT_MARGIN`` (``O_DIRECT`` costs less CPU and leaves the page cache to the
training job). The choice is kept for that file system (its device) for ``REPROBE_SECONDS``,
then measured again at the next big write; each choice is logged (``io_mode_chosen``, with
both rates). A file system that refuses ``O_DIRECT`` gets the page cache, as before.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Literal

from tierd.daemon.aio import blocking
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.concurrency import blocking_on, uninterrupted
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.beneath import Place, Root
from tierd.logs import get_logger

__all__ = [
    "DIRECT_MARGIN",
    "PROBE_BYTES",
    "PROBE_NAME",
    "PROBE_ROUNDS",
    "REPROBE_SECONDS",
    "Choice",
    "IoChooser",
    "Mode",
    "choose",
    "current",
    "probe",
]

Mode = Literal["direct", "buffered"]
#: Bytes each timed write of the probe sends (in the tier's chunks, from one budgeted buffer).
PROBE_BYTES = 16 * MIB
#: Timed writes each way, in turn (direct, buffered, buffered, direct, direct, buffered): the best
#: of each counts (a shared disk only ever makes a write slower).
PROBE_ROUNDS = 3
#: The page cache is chosen only when faster than ``O_DIRECT`` by this factor.
DIRECT_MARGIN = 1.25
#: How long a choice stands before the next big write measures again.
REPROBE_SECONDS = 3600.0
#: The probe's file is a temporary file of this name in the tier's root (never renamed into place).
PROBE_NAME = ".tierd-io-probe"

log = get_logger(__name__)


@dataclass(frozen=True)
class Choice:
    """How big files are written into one file system, why, and when that was decided (monotonic).

    ``refused``: the file system refuses ``O_DIRECT`` altogether.
    """

    mode: Mode
    reason: str
    at: float
    refused: bool = False


def _rate(nbytes: int, seconds: float) -> float:
    return round(nbytes / max(seconds, 1e-9) / 1e6, 1)


def choose(direct: Sequence[float], buffered: Sequence[float], nbytes: int = PROBE_BYTES) -> tuple[Mode, str]:
    """The mode the probe's timings (seconds per ``nbytes`` written and fsynced) call for, and why.

    No ``direct`` timing: the file system refused ``O_DIRECT``. Raises ValueError with no
    timing at all.
    """
    if not direct and not buffered:
        raise ValueError("no probe timing to choose from")
    if not direct:
        return "buffered", "the file system refuses O_DIRECT"
    d = _rate(nbytes, min(direct))
    if not buffered:
        return "direct", f"O_DIRECT {d} MB/s (the page cache was not measured)"
    b = _rate(nbytes, min(buffered))
    rates = f"O_DIRECT {d} MB/s, page cache {b} MB/s"
    if b > d * DIRECT_MARGIN:
        return "buffered", f"{rates}: the page cache faster by more than {DIRECT_MARGIN}x"
    return "direct", f"{rates}: O_DIRECT unless the page cache is {DIRECT_MARGIN}x faster"


def probe(
    view: memoryview, final: Place, nbytes: int = PROBE_BYTES, rounds: int = PROBE_ROUNDS
) -> tuple[list[float], list[float]]:
    """Seconds to write and fsync ``nbytes`` (from ``view``, a chunk at a time) by ``O_DIRECT`` and buffered.

    Writes a temporary file for ``final`` (removed before returning), each timed write at
    fresh offsets, as a hop allocates. ``O_DIRECT`` timings are empty where the file system
    refuses it. Blocking; raises OSError (FileNotFoundError: no tier root).
    """
    temp = posixcopy.create_temp(final)
    if temp is None:
        raise FileNotFoundError(f"{final.root.top}: tier root missing")
    timings: dict[Mode, list[float]] = {"direct": [], "buffered": []}
    direct_fd = -1
    try:
        direct_fd = posixcopy.open_direct(temp)
        for index in range(2 * rounds):
            mode: Mode = "direct" if index % 4 in (0, 3) else "buffered"
            if mode == "direct" and direct_fd < 0:
                continue
            fd = direct_fd if mode == "direct" else -1
            try:
                timings[mode].append(_timed_write(view, temp.fd, fd, index * nbytes, nbytes))
            except posixcopy.DirectRefused:
                os.close(direct_fd)
                direct_fd = -1
    finally:
        if direct_fd >= 0:
            os.close(direct_fd)
        temp.discard()
    return timings["direct"], timings["buffered"]


def _timed_write(view: memoryview, fd: int, direct_fd: int, offset: int, nbytes: int) -> float:
    """Seconds to ``hash_and_pwrite`` ``nbytes`` from ``offset`` and fsync, as a hop writes a file."""
    started = time.monotonic()
    for at in range(offset, offset + nbytes, len(view)):
        posixcopy.hash_and_pwrite(view[: min(len(view), offset + nbytes - at)], fd, at, direct_fd)
    os.fsync(fd)
    return time.monotonic() - started


def _device_of(path: os.PathLike[str] | str) -> int:
    return os.stat(path).st_dev


#: Choices made by probing, by device (``st_dev`` of a tier's root): shared by every backend
#: writing into that file system (a restore target on tier 0's, say).
_chosen: dict[int, Choice] = {}
#: Each tier's choice in force, by (tier name, root path): what ``GET /v1/tiers`` shows.
_in_force: dict[tuple[str, str], Choice] = {}


def current(tier: str, root: os.PathLike[str] | str) -> Choice | None:
    """The choice in force for the tier ``tier`` rooted at ``root``; None until its first big write."""
    return _in_force.get((tier, os.fspath(root)))


class IoChooser:
    """A tier's ``io_mode``: the configured one, or ``auto``'s measured choice (see the module docstring)."""

    def __init__(self, tier: str, configured: str = "auto", root: os.PathLike[str] | str = "") -> None:
        """``root``: the tier's root, under which ``current`` finds this chooser's choice."""
        if configured not in ("auto", "direct", "buffered"):
            raise ValueError(f"io_mode: {configured!r} is not auto, direct or buffered")
        self.tier = tier
        self.configured = configured
        self._key = (tier, os.fspath(root))
        self._choice: Choice | None = None
        self._device: int | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def choice(self) -> Choice | None:
        """The choice in force (None before the first big write); ``current`` finds it too."""
        return self._choice

    @choice.setter
    def choice(self, choice: Choice | None) -> None:
        self._choice = choice
        if choice is None:
            _in_force.pop(self._key, None)
        else:
            _in_force[self._key] = choice

    async def direct(self, root: Root, budget: ByteBudget, chunk_size: int) -> bool:
        """Whether big files go by ``O_DIRECT`` into ``root``; ``auto`` probes first without a fresh choice.

        The probe writes in ``root``'s top directory. Never raises: a probe that fails leaves
        ``O_DIRECT`` (logged ``io_probe_failed``).
        """
        if self.configured != "auto":
            if self.choice is None:
                self.choice = Choice(self.configured, "configured", time.monotonic())  # type: ignore[arg-type]
                self._log(self.choice)
            return self.configured == "direct"
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            choice = await self._current(root)
            if choice is None:
                choice = await self._measure(root, budget, chunk_size)
            self.choice = choice
        return choice.mode == "direct"

    @property
    def refuses_direct(self) -> bool:
        """Whether the file system was found to refuse ``O_DIRECT``."""
        return self.choice is not None and self.choice.refused

    def refused(self) -> None:
        """The file system refused an ``O_DIRECT`` write: the page cache from now on."""
        choice = Choice("buffered", "the file system refuses O_DIRECT", time.monotonic(), refused=True)
        self.choice = choice
        if self._device is not None:
            _chosen[self._device] = choice

    async def _current(self, root: Root) -> Choice | None:
        """The fresh choice made for this tier's file system (or this tier, its root not found), if any."""
        if self._device is None:
            with suppress(OSError):
                self._device = await blocking(_device_of, root.top)
        choice = self.choice if self._device is None else _chosen.get(self._device)
        if choice is None or time.monotonic() - choice.at > REPROBE_SECONDS:
            return None
        return choice

    async def _measure(self, root: Root, budget: ByteBudget, chunk_size: int) -> Choice:
        probe_place = root.place(PROBE_NAME)
        try:
            async with budget.aligned(chunk_size) as view:
                direct, buffered = await uninterrupted(blocking_on(view, probe, probe_place))
            mode, reason = choose(direct, buffered)
        except (OSError, ValueError) as exc:
            log.warning("io_probe_failed", tier=self.tier, error=str(exc), mode="direct")
            choice = Choice("direct", f"probe failed: {exc}", time.monotonic())
        else:
            choice = Choice(mode, reason, time.monotonic(), refused=not direct)
            self._log(choice)
        if self._device is not None:
            _chosen[self._device] = choice
        return choice

    def _log(self, choice: Choice) -> None:
        log.info(
            "io_mode_chosen",
            tier=self.tier,
            mode=choice.mode,
            configured=self.configured,
            reason=choice.reason,
        )
