"""Run by test_memory in a fresh interpreter: big copies through every path, then peak RSS.

``python -m tests.conformance.memprobe WORKDIR SIZE ENDPOINT BUCKET ACCESS SECRET`` writes
SIZE synthetic bytes to a POSIX tier, copies them to S3 (default part size and
concurrency: streamed parts), copies them back to a second POSIX tier (ranged GETs), and
prints one JSON line: peak RSS (VmHWM, and sampled per phase), the budget's peak, timings
and whether every checksum matched.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path

from tierd.config import PosixTier, S3Tier
from tierd.daemon import checksum
from tierd.daemon.backends import Backend, WriteRequest, copy_object, default_budget, make_backend

BLOCK = 1024 * 1024


class PatternReader:
    """SIZE bytes repeating one random MiB: cheap to make, impossible to compress away."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._block = os.urandom(BLOCK) * 2

    async def read_into(self, offset: int, buf: memoryview) -> int:
        want = max(0, min(len(buf), self.size - offset))
        done = 0
        while done < want:
            start = (offset + done) % BLOCK
            n = min(want - done, BLOCK)
            buf[done : done + n] = self._block[start : start + n]
            done += n
        return want

    async def close(self) -> None:
        pass


async def expected_checksum(reader: PatternReader) -> str:
    crc = checksum.Crc64()
    buf = memoryview(bytearray(8 * BLOCK))
    for offset in range(0, reader.size, len(buf)):
        n = await reader.read_into(offset, buf)
        crc.update(buf[:n])
    return crc.hexdigest()


def peak_rss_mb() -> float:
    """This process's RSS high-water mark (VmHWM).

    Not ``ru_maxrss``: Linux carries that across exec, so a child of a big pytest
    process would report the parent's size.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmHWM in /proc/self/status")


class RssSampler:
    """Peak RSS (MB) per phase, sampled from /proc every few milliseconds."""

    def __init__(self) -> None:
        self.phase = "start"
        self.peaks: dict[str, float] = {}
        self.budget_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        page_mb = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
        with open("/proc/self/statm") as statm:
            while not self._stop.wait(0.005):
                statm.seek(0)
                rss = int(statm.read().split()[1]) * page_mb
                self.peaks[self.phase] = round(max(self.peaks.get(self.phase, 0.0), rss), 1)
                self.budget_peak = max(self.budget_peak, default_budget().used)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


async def run(workdir: Path, size: int, s3: S3Tier) -> dict[str, object]:
    source = PatternReader(size)
    expected = await expected_checksum(source)
    (workdir / "a").mkdir()
    (workdir / "b").mkdir()
    first = make_backend(PosixTier(name="a", kind="posix", path=workdir / "a"))
    second = make_backend(PosixTier(name="b", kind="posix", path=workdir / "b"))
    remote = make_backend(s3)
    backends: list[Backend] = [first, second, remote]
    times: dict[str, float] = {}
    sampler = RssSampler()
    try:
        sampler.phase = start_phase = "posix_write"
        start = time.monotonic()
        ok = (await first.write(WriteRequest("big.bin", source, expected))).checksum == expected
        times[start_phase] = time.monotonic() - start
        sampler.phase = start_phase = "to_s3"
        start = time.monotonic()
        ok &= (await copy_object(first, "big.bin", remote, "big.bin", expected)).checksum == expected
        times[start_phase] = time.monotonic() - start
        sampler.phase = start_phase = "from_s3"
        start = time.monotonic()
        ok &= (await copy_object(remote, "big.bin", second, "big.bin", expected)).checksum == expected
        times[start_phase] = time.monotonic() - start
    finally:
        sampler.stop()
        for backend in backends:
            await backend.close()
    return {
        "peak_rss_mb": peak_rss_mb(),
        "ok": ok,
        "seconds": times,
        "phase_peaks_mb": sampler.peaks,
        "budget_peak_mb": sampler.budget_peak / (1024 * 1024),
    }


def main(argv: list[str]) -> None:
    workdir, size, endpoint, bucket, access, secret = argv
    tier = S3Tier(
        name="s3", kind="s3", bucket=bucket, endpoint_url=endpoint, addressing_style="path",
        region="us-east-1", access_key_id=access, secret_access_key=secret,
    )  # fmt: skip
    print(json.dumps(asyncio.run(run(Path(workdir), int(size), tier))))


if __name__ == "__main__":
    main(sys.argv[1:])
