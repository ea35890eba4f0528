"""Telling local file systems from network and parallel ones, by the device of a path."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tierd.daemon.backends.posix.fstype import filesystem_type, is_local


def mountinfo_for(tmp_path: Path, path: Path, kind: str) -> Path:
    """A mountinfo whose line for ``path``'s device says ``kind``, among unrelated ones."""
    device = os.stat(path).st_dev
    numbers = f"{os.major(device)}:{os.minor(device)}"
    lines = [
        "22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw",
        f"36 35 {numbers} /data /mnt/tier rw,noatime shared:1 master:2 - {kind} srv:/export rw,flock",
        "40 1 7:0 / /mnt/other rw - ext4 /dev/loop0 rw",
    ]
    info = tmp_path / "mountinfo"
    info.write_text("\n".join(lines) + "\n")
    return info


@pytest.mark.parametrize(
    ("kind", "local"), [("ext4", True), ("xfs", True), ("tmpfs", True), ("lustre", False), ("nfs4", False)]
)
def test_the_type_comes_from_the_line_of_the_paths_device(tmp_path: Path, kind: str, local: bool) -> None:
    info = mountinfo_for(tmp_path, tmp_path, kind)
    assert filesystem_type(tmp_path, info) == kind
    assert is_local(tmp_path, info) is local


def test_this_machines_own_mountinfo_agrees_with_stat(tmp_path: Path) -> None:
    stat_says = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True)
    kind = filesystem_type(tmp_path)
    assert kind is not None
    assert stat_says.stdout.strip().startswith(kind[:3])  # stat says ext2/ext3 for ext4


def test_unknown_devices_and_missing_information_are_not_local(tmp_path: Path) -> None:
    unrelated = tmp_path / "mountinfo"
    unrelated.write_text("40 1 4095:4095 / /mnt/other rw - ext4 /dev/loop0 rw\n")
    assert filesystem_type(tmp_path, unrelated) is None
    assert is_local(tmp_path, unrelated) is False
    assert is_local(tmp_path, tmp_path / "no-such-mountinfo") is False
    assert is_local(tmp_path / "missing", unrelated) is False
