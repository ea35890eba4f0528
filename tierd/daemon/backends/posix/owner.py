"""Giving what tierd wrote the owner, group and mode recorded at first sight (``Ownership``).

A file is created 0600 (a directory 0700) under a temporary name, owned by the daemon;
``apply_to_fd`` then gives it the recorded owner and group (``fchown``) and only then its
mode (``fchmod``), before the rename makes it visible. So it is never more readable than it
will be, not even for a moment: a group-readable mode is set only once the group is the
recorded one, and chown goes first because Linux clears setuid/setgid bits on chown.

Bits never copied: setuid and setgid on a file (a job's file given to another owner by a
restore must not become that owner's setuid program; rclone's local backend drops them too),
and setuid on a directory (meaningless on Linux). A directory keeps setgid (new files inherit
its group: shared project trees rely on it) and the sticky bit; a file keeps the sticky bit
(it does nothing there).

When the daemon is not root, chown to another owner is refused (EPERM; EINVAL for an id
outside its user namespace). Then nothing is changed: the file stays 0600 and the daemon's,
never wider, and a warning ``owner_not_applied`` is logged once per process. Other errors
are raised (``posix.errors`` translates them).

A directory's descriptor may be ``O_PATH`` (how ``nofollow`` walks directories): fchown and
fchmod refuse those (EBADF), so the change then goes through ``/proc/self/fd/N``, which is
exactly that directory (no walk, no symlink followed on the way). A file's descriptor is
the one it was written through, never ``O_PATH``: no ``fcntl`` asks (one system call less
for each file copied). Every function blocks.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from tierd.daemon.backends.base import Ownership
from tierd.logs import get_logger

__all__ = ["DIR_BITS", "FILE_BITS", "apply_to_dir", "apply_to_fd", "dir_mode", "file_mode"]

log = get_logger(__name__)

#: The recorded mode bits a file gets: all but setuid and setgid.
FILE_BITS = 0o7777 & ~(stat.S_ISUID | stat.S_ISGID)
#: The recorded mode bits a directory gets: all but setuid.
DIR_BITS = 0o7777 & ~stat.S_ISUID
#: What chown answers a daemon that may not give files away (not root, or an unmapped id).
_NOT_PERMITTED = frozenset({errno.EPERM, errno.EINVAL})
_O_PATH = getattr(os, "O_PATH", 0)
_warned = False


def file_mode(owner: Ownership) -> int:
    """The mode a file of this recorded ``owner`` gets (``FILE_BITS`` of it)."""
    return owner.mode & FILE_BITS


def dir_mode(owner: Ownership) -> int:
    """The mode a directory of this recorded ``owner`` gets (``DIR_BITS`` of it)."""
    return owner.mode & DIR_BITS


def apply_to_fd(fd: int, owner: Ownership | None) -> None:
    """Give the file open for writing at ``fd`` the recorded owner and group, then its mode; None: nothing.

    Left as it is (0600, the daemon's) when the daemon may not chown (logged once). Raises
    OSError for anything else (EIO, EROFS, ...).
    """
    if owner is not None:
        _apply(fd, owner, file_mode(owner), maybe_path=False)


def apply_to_dir(dir_fd: int, owner: Ownership | None) -> None:
    """Give the directory ``dir_fd`` (``O_PATH`` or not) the recorded owner, then its mode.

    As ``apply_to_fd``. A mode without the owner's write bit (0o555) keeps even root's later
    creates out only for a daemon that is not root: apply it once the entries are in place.
    """
    if owner is not None:
        _apply(dir_fd, owner, dir_mode(owner), maybe_path=True)


def _apply(fd: int, owner: Ownership, mode: int, *, maybe_path: bool) -> None:
    """fchown, then fchmod (through ``/proc/self/fd`` for an ``O_PATH`` descriptor, if ``maybe_path``)."""
    target: int | str = fd
    if maybe_path and _O_PATH and fcntl.fcntl(fd, fcntl.F_GETFL) & _O_PATH:
        target = f"/proc/self/fd/{fd}"
    try:
        os.chown(target, owner.uid, owner.gid)
    except OSError as exc:
        if exc.errno not in _NOT_PERMITTED:
            raise
        _refused(owner, exc)
        return
    os.chmod(target, mode)


def _refused(owner: Ownership, exc: OSError) -> None:
    """Log, once per process, that owners cannot be given: what tierd writes stays 0600."""
    global _warned
    if _warned:
        return
    _warned = True
    log.warning(
        "owner_not_applied",
        uid=owner.uid,
        gid=owner.gid,
        error=os.strerror(exc.errno or 0),
        daemon_uid=os.geteuid(),
        effect="copies stay 0600 and owned by the daemon's user (never wider); run tierd as root",
    )
