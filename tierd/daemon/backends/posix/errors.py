"""The one boundary where a POSIX tier's ``OSError`` becomes a tierd error.

ENOENT is NotFound; ENOSPC and EDQUOT are NoSpace, a TransientBackendError (retention or an
operator can free space, so a later retry may succeed); EIO, ESTALE, timeouts and other
network file system blips are TransientBackendError; EACCES, EROFS, ENOTDIR and the rest
are PermanentBackendError.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from tierd.errors import NoSpace, NotFound, PermanentBackendError, TierdError, TransientBackendError

__all__ = ["os_errors", "translate_oserror"]

_NO_SPACE_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT") if hasattr(errno, name))
_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EIO",
        "EAGAIN",
        "EINTR",
        "ETIMEDOUT",
        "ESTALE",
        "EBUSY",
        "ENOLCK",
        "ENOMEM",
        "ECONNRESET",
        "ECONNREFUSED",
        "ECONNABORTED",
        "EHOSTDOWN",
        "EHOSTUNREACH",
        "ENETDOWN",
        "ENETUNREACH",
        "ENETRESET",
        "ECOMM",
        "EREMOTEIO",
    )
    if hasattr(errno, name)
)


def translate_oserror(exc: OSError, action: str, location: str) -> TierdError:
    """The tierd error for an ``OSError`` raised while doing ``action`` on ``location``."""
    message = f"{action} {location}: {exc.strerror or exc}"
    if exc.errno == errno.ENOENT:
        return NotFound(message)
    if exc.errno in _NO_SPACE_ERRNOS:
        return NoSpace(message)
    if exc.errno in _TRANSIENT_ERRNOS:
        return TransientBackendError(message)
    return PermanentBackendError(message)


@contextmanager
def os_errors(action: str, location: str) -> Iterator[None]:
    """The one boundary where OSError becomes a tierd error."""
    try:
        yield
    except OSError as exc:
        raise translate_oserror(exc, action, location) from exc
