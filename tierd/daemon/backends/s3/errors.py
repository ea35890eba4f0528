"""The one boundary where botocore, aiobotocore, aiohttp and awscrt errors become tierd errors.

===========================================================  ===========================
what the store or the network said                           tierd error
===========================================================  ===========================
NoSuchKey, NotFound, a bare 404; NoSuchUpload                 NotFound
BadDigest, InvalidDigest, XAmzContentSHA256Mismatch,          IntegrityError
botocore's FlexibleChecksumError
SlowDown, Throttling*, RequestTimeout, InternalError,         TransientBackendError
ServiceUnavailable, OperationAborted, any 5xx, 408, 429,
InvalidPart (a part not held as its answer said: the
next try lists the parts and sends those again),
connection errors, timeouts, truncated bodies;
PreconditionFailed (412: the object changed since it
was opened, or the ETag it was opened with was wrong)
InvalidObjectState (a GET of an object in GLACIER or          ObjectArchived
DEEP_ARCHIVE not restored, or whose restore is under way)
AccessDenied, NoSuchBucket, InvalidAccessKeyId,               PermanentBackendError
SignatureDoesNotMatch, every other 4xx, missing credentials,
bad parameters, awscrt errors (signing a lean request),
anything else
===========================================================  ===========================
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from awscrt.exceptions import AwsCrtError
from botocore import exceptions as boto

from tierd.errors import (
    IntegrityError,
    NotFound,
    ObjectArchived,
    PermanentBackendError,
    TierdError,
    TransientBackendError,
)

__all__ = ["range_not_satisfiable", "s3_errors", "translate"]

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchUpload"})
_INTEGRITY = frozenset({"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"})
_TRANSIENT = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
        "PriorRequestNotComplete",
        "RequestTimeTooSkewed",
        # CompleteMultipartUpload: a part is not held with the ETag its answer gave. The next
        # try keeps only the parts ListParts shows as recorded, and sends the others again.
        "InvalidPart",
    }
)
_TRANSIENT_STATUS = frozenset({408, 429})
# tierd's one precondition is the If-Match that pins a reader's ranged GETs to the ETag its
# opening GET saw. A 412 means the object changed since, or that ETag was wrong: the next
# try opens it again, and its bytes must still hash to the checksum recorded at first sight.
_CHANGED = "PreconditionFailed"
_ARCHIVED = "InvalidObjectState"

_TRANSIENT_BOTO = (
    boto.HTTPClientError,  # connection closed, read timeouts, streaming errors
    boto.ConnectionError,  # endpoint unreachable, connect timeout, proxy
    boto.IncompleteReadError,
)


def translate(exc: BaseException, action: str, location: str) -> TierdError | None:
    """The tierd error for ``exc``, or None when it is not a storage error."""
    if isinstance(exc, TierdError):
        return exc
    where = f"{action} {location}"
    if isinstance(exc, boto.ClientError):
        return _client_error(exc, where)
    if isinstance(exc, boto.FlexibleChecksumError):
        return IntegrityError(f"{where}: {exc}")
    if isinstance(exc, _TRANSIENT_BOTO):
        return TransientBackendError(f"{where}: {exc}{_underlying(exc)}")
    if isinstance(exc, boto.BotoCoreError):
        return PermanentBackendError(f"{where}: {exc}")
    if isinstance(exc, AwsCrtError):
        return PermanentBackendError(f"{where}: awscrt {exc.name}: {exc.message}")
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError):
        return TransientBackendError(f"{where}: {type(exc).__name__}: {exc}")
    return None


def _underlying(exc: boto.BotoCoreError) -> str:
    """What aiohttp said under a botocore connection error, which may not say it.

    aiobotocore reports any aiohttp connection error, a reset mid-request included, as
    "Could not connect to the endpoint URL".
    """
    cause = getattr(exc, "kwargs", {}).get("error")
    return f" ({type(cause).__name__}: {cause})" if isinstance(cause, BaseException) else ""


def _client_error(exc: boto.ClientError, where: str) -> TierdError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    # the store's answer as it gave it: "403 AccessDenied Access Denied", "503 SlowDown ..."
    answer = " ".join(dict.fromkeys(part for part in (str(status) if status else "", code) if part))
    message = f"{where}: {answer} {error.get('Message', '')}".rstrip()
    if code in _NOT_FOUND or (status == 404 and not code.startswith("NoSuch")):
        return NotFound(message)
    if code in _INTEGRITY:
        return IntegrityError(message)
    if code in _TRANSIENT or status >= 500 or status in _TRANSIENT_STATUS:
        return TransientBackendError(message)
    if code == _ARCHIVED:
        return ObjectArchived(
            f"{message} (the object is in an archive storage class: S3 must restore it with"
            " RestoreObject before it can be read)"
        )
    if code == _CHANGED or status == 412:
        return TransientBackendError(f"{message} (changed since it was opened: opened again on the next try)")
    return PermanentBackendError(message)


def range_not_satisfiable(exc: boto.ClientError) -> bool:
    """Whether the store refused a Range (416 InvalidRange: AWS's answer for an empty object)."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return exc.response.get("Error", {}).get("Code") == "InvalidRange" or status == 416


@contextmanager
def s3_errors(action: str, location: str) -> Iterator[None]:
    """Translate storage errors raised inside the block; let everything else through."""
    try:
        yield
    except Exception as exc:
        translated = translate(exc, action, location)
        if translated is None or translated is exc:
            raise
        raise translated from exc
