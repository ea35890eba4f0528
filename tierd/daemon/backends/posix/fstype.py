"""Which kind of file system holds a path: this node's own disks, or a network or parallel one.

Small files cost a local file system CPU (the kernel's work and Python's between system
calls), while on NFS, Lustre or GPFS each open and create also waits for a server. The
pipeline runs fewer groups of small files at once between two local file systems (see
``transfer.copyset``): there, more threads only hand the GIL to each other. The type comes from
``/proc/self/mountinfo``, matched on the device number of the path, so bind mounts and
symlinks resolve to the file system that really holds it. Anything not known to be local,
or not found, counts as not local: the pipeline then keeps every lane. Blocking: call
through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["LOCAL_TYPES", "filesystem_type", "is_local"]

#: File systems on block devices or memory of this node (``overlay``: a container's root).
LOCAL_TYPES = frozenset(
    {
        "bcachefs",
        "btrfs",
        "exfat",
        "ext2",
        "ext3",
        "ext4",
        "f2fs",
        "jfs",
        "ntfs3",
        "overlay",
        "ramfs",
        "reiserfs",
        "tmpfs",
        "vfat",
        "xfs",
        "zfs",
    }
)
MOUNTINFO = Path("/proc/self/mountinfo")


def filesystem_type(path: Path, mountinfo: Path = MOUNTINFO) -> str | None:
    """The type of the file system holding ``path`` (``ext4``, ``lustre``, ...); None if unknown.

    Raises OSError when ``path`` cannot be stat-ed.
    """
    device = os.stat(path).st_dev
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None  # not Linux, or no /proc
    for line in lines:
        # "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw": optional
        # fields end at "-", the type follows it.
        fields = line.split()
        if len(fields) > 2 and fields[2] == wanted and "-" in fields[6:]:
            after = fields.index("-", 6) + 1
            return fields[after] if after < len(fields) else None
    return None


def is_local(path: Path, mountinfo: Path = MOUNTINFO) -> bool:
    """Whether ``path`` is on a file system of this node's own (see ``LOCAL_TYPES``); never raises."""
    try:
        kind = filesystem_type(path, mountinfo)
    except OSError:
        return False
    return kind in LOCAL_TYPES
