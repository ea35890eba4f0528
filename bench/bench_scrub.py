"""Scrub throughput against the bandwidth setting (issue 18's figure).

A POSIX tier ``pfs`` holds ``TIERD_BENCH_SCRUB_MIB`` (256; 32 quick) MiB of checkpoints (16
files of equal size each, real random bytes, recorded with their CRC64NVME), all due for a
re-check. In-process, through ``ScrubService.check_round`` (the daemon's own loop body), the
whole tier is re-checked once per ``scrub.bandwidth`` in ``BANDWIDTHS``; the page cache is
warm (the first, untimed pass reads the files once), so the disk is not what is measured.

``tierd_seconds`` is the pass's wall time; ``baseline_seconds`` is what the setting allows
(bytes / bandwidth), so ``ratio`` near 1 means the cap is what limits the scrub, and
``throughput_bytes_per_second`` is bytes / seconds. The ``unlimited`` row (a bandwidth of
1 TB/s) compares with re-hashing the same files in one thread with no catalog at all.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import update

from bench.common import bench_root, emit, env_int, filesystem_type, note, quick
from bench.harness import tierd_source
from tierd.config import Config
from tierd.daemon import checksum
from tierd.daemon.backends import close_backends, make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.catalog.models import Checkpoint, File, Replica, Run, utcnow
from tierd.daemon.context import Context
from tierd.daemon.scrub import ScrubService

MB = 1_000_000
BANDWIDTHS = [25 * MB, 50 * MB, 100 * MB, 200 * MB, 1_000_000 * MB]
FILES_PER_CHECKPOINT = 16
CHECKPOINT_BYTES = 16 * 1024 * 1024


def _fill(root: Path, db: Database, total: int) -> int:
    """Checkpoints of random bytes on ``root/pfs`` recorded as verified two days ago; returns bytes."""
    per_file = CHECKPOINT_BYTES // FILES_PER_CHECKPOINT
    written = 0
    long_ago = utcnow() - timedelta(days=2)
    with db.session() as s:
        run = Run(name="bench")
        for step in range(max(1, total // CHECKPOINT_BYTES)):
            path = f"bench/step{step:05d}"
            row = Checkpoint(run=run, step=step, path=path, format="dcp", total_bytes=CHECKPOINT_BYTES)
            for i in range(FILES_PER_CHECKPOINT):
                data = os.urandom(per_file)
                target = root / "pfs" / path / f"shard{i}"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                crc = checksum.Crc64()
                crc.update(data)
                row.files.append(
                    File(
                        relpath=f"{path}/shard{i}",
                        size=per_file,
                        checksum_algo="crc64nvme",
                        checksum=crc.hexdigest(),
                    )
                )
                written += per_file
            for index, tier in enumerate(("nvme", "pfs")):
                row.replicas.append(
                    Replica(tier=tier, tier_index=index, state="verified", verified_at=long_ago)
                )
            s.add(row)
    return written


async def _pass(root: Path, db: Database, bandwidth: int) -> float:
    """One whole pass over ``pfs`` at ``bandwidth`` bytes per second; returns its seconds."""
    config = Config(
        catalog={"url": db.url},
        tiers=[
            {"name": "nvme", "kind": "posix", "path": str(root / "nvme")},
            {
                "name": "pfs",
                "kind": "posix",
                "path": str(root / "pfs"),
                "scrub": {"every": "1d", "bandwidth": bandwidth},
            },
        ],
    )
    backends = {t.name: make_backend(t) for t in config.tiers}
    with db.session() as s:  # every replica due again
        s.execute(update(Replica).values(checked_at=None))
    service = ScrubService(Context(config=config, db=db), backends)
    started = time.perf_counter()
    while await service.check_round("pfs"):
        pass
    elapsed = time.perf_counter() - started
    await close_backends(backends)
    return elapsed


def _plain_hash(root: Path) -> float:
    started = time.perf_counter()
    for path in sorted((root / "pfs").rglob("shard*")):
        crc = checksum.Crc64()
        crc.update(path.read_bytes())
    return time.perf_counter() - started


def main() -> None:
    total = env_int("TIERD_BENCH_SCRUB_MIB", 32 if quick() else 256) * 1024 * 1024
    root = Path(tempfile.mkdtemp(prefix="scrub-", dir=bench_root()))
    try:
        for name in ("nvme", "pfs"):
            (root / name).mkdir()
        db = Database(f"sqlite:///{root / 'catalog.db'}")
        upgrade(db)
        size = _fill(root, db, total)
        note(f"scrub: {size} bytes on {filesystem_type(root)}; warming the page cache")
        asyncio.run(_pass(root, db, BANDWIDTHS[-1]))
        for bandwidth in BANDWIDTHS:
            seconds = asyncio.run(_pass(root, db, bandwidth))
            unlimited = bandwidth == BANDWIDTHS[-1]
            baseline = _plain_hash(root) if unlimited else size / bandwidth
            emit(
                f"scrub_posix_{'unlimited' if unlimited else f'{bandwidth // MB}MBps'}",
                seconds,
                "crc64 of every file, one thread, no catalog" if unlimited else "bytes / scrub.bandwidth",
                baseline,
                bandwidth_bytes_per_second=bandwidth,
                bytes=size,
                throughput_bytes_per_second=round(size / seconds),
                filesystem=filesystem_type(root),
                tierd_source=tierd_source(),
            )
        db.dispose()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
