"""The one boundary where azure-core and aiohttp errors become tierd errors.

===========================================================  ===========================
what the service or the network said                         tierd error
===========================================================  ===========================
BlobNotFound, a bare 404                                     NotFound
Crc64Mismatch, Md5Mismatch, InvalidMd5                        IntegrityError
BlobArchived (a read of a blob in the Archive tier),          ObjectArchived (permanent)
BlobBeingRehydrated
ServerBusy, OperationTimedOut, InternalError, any 5xx,        TransientBackendError
408, 429, connection errors, timeouts, cut bodies;
ConditionNotMet (412: the blob changed since it was opened)
ContainerNotFound, AuthenticationFailed, AuthorizationFailure, PermanentBackendError
every other 4xx, missing credentials, anything else
===========================================================  ===========================
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from azure.core import exceptions as az

from tierd.errors import (
    IntegrityError,
    NotFound,
    ObjectArchived,
    PermanentBackendError,
    TierdError,
    TransientBackendError,
)

__all__ = ["answer_error", "azure_errors", "error_code", "translate"]

_INTEGRITY = frozenset({"Crc64Mismatch", "Md5Mismatch", "InvalidMd5", "BothCrc64AndMd5HeaderPresent"})
_ARCHIVED = frozenset({"BlobArchived", "BlobBeingRehydrated"})
_TRANSIENT = frozenset({"ServerBusy", "OperationTimedOut", "InternalError", "ServiceUnavailable"})
_TRANSIENT_STATUS = frozenset({408, 429})
_MESSAGE = re.compile(r"<Message>([^<]*)</Message>", re.DOTALL)


def error_code(exc: az.HttpResponseError) -> str:
    """The service's ``x-ms-error-code`` (or the body's code), or ""."""
    code = getattr(exc, "error_code", None)
    headers = getattr(exc.response, "headers", None)
    if not code and headers is not None:
        code = headers.get("x-ms-error-code")
    return str(getattr(code, "value", code) or "")  # the SDK hands some codes over as enums


def translate(exc: BaseException, action: str, location: str) -> TierdError | None:
    """The tierd error for ``exc``, or None when it is not a storage error."""
    if isinstance(exc, TierdError):
        return exc
    where = f"{action} {location}"
    if isinstance(exc, az.HttpResponseError):
        return _response_error(exc, where)
    if isinstance(exc, az.ServiceRequestError | az.ServiceResponseError | az.IncompleteReadError):
        return TransientBackendError(f"{where}: {type(exc).__name__}: {_first_line(exc)}")
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError):
        return TransientBackendError(f"{where}: {type(exc).__name__}: {exc}")
    if isinstance(exc, az.ClientAuthenticationError | az.AzureError):
        return PermanentBackendError(f"{where}: {type(exc).__name__}: {_first_line(exc)}")
    return None


def _first_line(exc: BaseException) -> str:
    """azure-core messages run to many lines (the whole XML error): the first says it."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _response_error(exc: az.HttpResponseError, where: str) -> TierdError:
    return answer_error(int(exc.status_code or 0), error_code(exc), _first_line(exc), where)


def answer_error(status: int, code: str, text: str, where: str) -> TierdError:
    """The tierd error for an answer of ``status`` with ``x-ms-error-code`` ``code``.

    ``text`` is the SDK's message or the answer's body (its XML ``<Message>`` is shown).
    """
    found = _MESSAGE.search(text)
    detail = (found.group(1) if found else text).strip().splitlines()[0][:300] if text.strip() else ""
    answer = " ".join(part for part in (str(status) if status else "", code) if part)
    message = f"{where}: {answer} {detail}".rstrip()
    if code in _INTEGRITY:
        return IntegrityError(message)
    if code in _ARCHIVED:
        return ObjectArchived(
            f"{message} (the blob is in the Archive access tier: rehydrate it to Hot or Cool "
            "with Set Blob Tier, which takes hours, then restore again)"
        )
    if status == 404 and code != "ContainerNotFound":
        return NotFound(message)
    if code in _TRANSIENT or status >= 500 or status in _TRANSIENT_STATUS:
        return TransientBackendError(message)
    if status == 412:
        return TransientBackendError(f"{message} (changed since it was opened: opened again on the next try)")
    return PermanentBackendError(message)


@contextmanager
def azure_errors(action: str, location: str) -> Iterator[None]:
    """Translate storage errors raised inside the block; let everything else through."""
    try:
        yield
    except Exception as exc:
        translated = translate(exc, action, location)
        if translated is None or translated is exc:
            raise
        raise translated from exc
