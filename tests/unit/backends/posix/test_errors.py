"""OSError becomes a tierd error at the POSIX backend's one boundary."""

from __future__ import annotations

import errno

import pytest

from tierd.daemon.backends.posix.errors import translate_oserror
from tierd.errors import NoSpace, NotFound, PermanentBackendError, TierdError, TransientBackendError


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (errno.ENOENT, NotFound),
        (errno.ENOSPC, NoSpace),  # retention or an operator can free space
        (errno.EDQUOT, NoSpace),
        (errno.EIO, TransientBackendError),
        (errno.ESTALE, TransientBackendError),
        (errno.ETIMEDOUT, TransientBackendError),
        (errno.EACCES, PermanentBackendError),
        (errno.EPERM, PermanentBackendError),
        (errno.EROFS, PermanentBackendError),
        (errno.ENOTDIR, PermanentBackendError),
        (errno.EISDIR, PermanentBackendError),
    ],
)
def test_oserrors(code: int, expected: type[TierdError]) -> None:
    error = translate_oserror(OSError(code, "text"), "write", "/t/x")
    assert type(error) is expected
    assert "/t/x" in str(error)
    assert error.retryable == issubclass(expected, TransientBackendError)
