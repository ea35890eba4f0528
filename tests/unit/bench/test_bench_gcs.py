"""bench_gcs's own parts: a side's seconds, CPU and peak RSS, and rclone pointed at the emulator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench import bench_gcs
from tests.fixtures.gcsemulator import GcsEmulator


def test_it_is_a_benchmark_of_its_own() -> None:
    assert "gcs" in cli.available()
    assert "gcs" not in cli.comparable()  # no --against: the emulator, not the daemon, sets its pace


def test_a_side_is_measured_from_its_own_process() -> None:
    grow = "b = bytearray(64 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); sum(range(3_000_000))"
    seconds, cpu, peak = bench_gcs._measured([sys.executable, "-c", grow])
    assert seconds > 0
    assert cpu > 0
    assert 64 * 2**20 <= peak < 512 * 2**20  # its own 64 MiB, not the bench's pages before exec


def test_a_failing_side_says_why() -> None:
    with pytest.raises(RuntimeError, match=r"failed \(3\):\nboom"):
        bench_gcs._measured([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])


def test_rclone_talks_to_the_emulator(gcs_emulator: GcsEmulator, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"a" * 1000)
    bucket = gcs_emulator.create_bucket()
    flags = bench_gcs.rclone_flags(gcs_emulator)
    subprocess.run([bench_gcs.rclone_binary(), "copy", str(src), f":gcs:{bucket}/x", *flags], check=True)
    assert [(o["name"], o["size"]) for o in gcs_emulator.objects(bucket)] == [("x/a.bin", "1000")]


def test_a_download_is_also_compared_with_rclone_and_its_sync() -> None:
    tierd = [(3.0, 1.0, 100, 0.5, 0.0)]
    rclone = [(1.0, 1.0, 300, 0.5, 1.0), (2.0, 1.0, 300, 0.5, 2.0)]
    (t, _, r), fields = bench_gcs._line(tierd, rclone)
    assert (t, r) == (3.0, 2.0)
    assert (fields["baseline_and_sync_spread"], fields["ratio_to_baseline_and_sync"]) == (
        [2.0, 4.0, 4.0],
        0.75,
    )
    _, upload = bench_gcs._line(tierd, [(2.0, 1.0, 300, 0.5, 0.0)])
    assert "ratio_to_baseline_and_sync" not in upload


async def test_a_posix_destination_chooses_its_io_mode_before_the_copy_is_timed(tmp_path: Path) -> None:
    """The auto probe (96 MiB written and synced) is a daemon's once an hour, not each copy's."""
    from bench.storecopy import _io_mode_chosen
    from tierd.config import PosixTier
    from tierd.daemon.backends import ByteBudget, PosixBackend
    from tierd.daemon.transfer.copyset import GROUP_FILE_LIMIT
    from tierd.daemon.transfer.spec import FileSpec

    posix = PosixBackend(PosixTier(name="p", kind="posix", path=str(tmp_path)), budget=ByteBudget(64 * 2**20))
    try:
        await _io_mode_chosen(posix, [FileSpec("small", GROUP_FILE_LIMIT, "x", 0)])
        assert posix.io_mode.choice is None  # grouped files only: no write would probe
        await _io_mode_chosen(posix, [FileSpec("big", GROUP_FILE_LIMIT + 1, "x", 0)])
        assert posix.io_mode.choice is not None
    finally:
        await posix.close()
