"""A tier-0 file swapped after it was recorded (TOCTOU): the copy fails, nothing outside is read.

The checkpoint is recorded with regular files; then one is replaced by a symlink to a
secret outside the tiers, a hard link to it, a FIFO with no writer, or its directory by a
symlink to a directory outside holding the same names. The real pipeline (real POSIX tiers) must
fail the hop without opening the secret (inotify on its inode), without hanging on the
FIFO, and leave neither the secret's bytes nor a temporary file on the next tier.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.opens import OpenSpy
from tests.fixtures.pipeline_run import run_pipeline_until
from tests.integration.daemon_helpers import all_jobs, record_checkpoint, replicas, write_files
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.service import PipelineService
from tierd.daemon.transfer.retry import Backoff

pytestmark = pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="inotify and O_PATH are Linux's")

FAST = PipelineOptions(
    poll_interval=0.02,
    lease_seconds=30,
    renew_interval=0.05,
    progress_interval=0.02,
    file_attempts=2,
    file_backoff=Backoff(base=0.001, cap=0.01),
    job_backoff=Backoff(base=30, cap=30),
)
#: Both read paths: a small file read whole at open, a larger one streamed from its fd.
SIZES = {"small": 1000, "large": 600_000}
#: What the failed job says, by swap.
ERRORS = {
    "symlink": "a symlink, never followed",
    "fifo": "not a regular file",
    "directory symlink": "Not a directory",
    "hard link": "a hard link (2 links)",
}


def _config(tmp_path: Path, db: Database) -> Config:
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
    return Config(
        node="n1",
        catalog={"url": db.url},
        tiers=[
            {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
            {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
        ],
    )


async def _copy_until_failed(config: Config, db: Database, checkpoint_id: int) -> None:
    service = PipelineService(Context(config=config, db=db), FAST)  # its own backends, as the daemon's
    await run_pipeline_until(service, lambda: replicas(db, checkpoint_id)["pfs"].state == "failed")


def _holds(root: Path, data: bytes) -> list[Path]:
    """Files under ``root`` holding ``data`` (or any temporary file)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and (data in path.read_bytes() or "tierd-tmp" in path.name):
            found.append(path)
    return found


@pytest.mark.parametrize("which", list(SIZES))
@pytest.mark.parametrize("swap", list(ERRORS))
async def test_swapped_source_fails_the_copy_and_reads_nothing_outside(
    swap: str, which: str, tmp_path: Path, sqlite_db: Database
) -> None:
    config = _config(tmp_path, sqlite_db)
    ckpt = tmp_path / "nvme" / "r" / "s1"
    write_files(ckpt / "shards", {"small": SIZES["small"], "large": SIZES["large"]})
    cid = record_checkpoint(sqlite_db, config, "r", 1, "r/s1")
    outside = tmp_path / "etc"
    outside.mkdir()
    secret = os.urandom(SIZES[which])  # as long as the recorded file: only its bytes differ
    for name in SIZES:
        (outside / name).write_bytes(secret)
    victim = ckpt / "shards" / which
    if swap == "symlink":
        victim.unlink()
        victim.symlink_to(outside / which)
    elif swap == "fifo":
        victim.unlink()
        os.mkfifo(victim)
    elif swap == "hard link":
        victim.unlink()
        os.link(outside / which, victim)
    else:
        (ckpt / "shards").rename(ckpt / "moved")
        (ckpt / "shards").symlink_to(outside)
    spy = OpenSpy(*(outside / name for name in SIZES))
    try:
        await _copy_until_failed(config, sqlite_db, cid)
        assert spy.read() == set()
        if swap != "hard link":  # a hard link is the secret's own inode: opened, found linked, closed
            assert spy.opened() == set()
    finally:
        spy.close()
        if swap == "fifo":
            with pytest.raises(OSError, match="No such device"):  # ENXIO: nobody waits to read it
                os.open(victim, os.O_WRONLY | os.O_NONBLOCK)
    assert _holds(tmp_path / "pfs", secret[:4096]) == []
    (job,) = all_jobs(sqlite_db)
    assert job.last_error is not None
    assert ERRORS[swap] in job.last_error
