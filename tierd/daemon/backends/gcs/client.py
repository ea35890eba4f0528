"""The JSON API over httpx: URLs, one request helper, and the one boundary for errors.

===========================================================  ===========================
what GCS or the network said                                 tierd error
===========================================================  ===========================
404, 410 (a resumable session that expired or was cancelled)  NotFound
400 whose message says a CRC32C or MD5 does not match         IntegrityError
408, 429, any 5xx, connection errors, timeouts, cut bodies    TransientBackendError
401, 403, every other 4xx                                     PermanentBackendError
===========================================================  ===========================

The service's own checksum refusal (a declared ``crc32c`` that the received bytes do not
have) is an IntegrityError: the bytes were damaged on their way, and a new try sends them
again. httpx retries nothing; the file level (``tierd.daemon.transfer.retry``) does.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx

from tierd.daemon.backends.gcs.auth import Credentials
from tierd.errors import IntegrityError, NotFound, PermanentBackendError, TransientBackendError

__all__ = ["GOOGLE_ENDPOINT", "GcsClient", "emulator_endpoint", "gcs_errors", "raise_for", "raise_status"]

GOOGLE_ENDPOINT = "https://storage.googleapis.com"
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 120.0
_CHECKSUM_REFUSED = re.compile(r"crc32c|md5", re.IGNORECASE)
#: How much of an error body a message shows (characters).
BODY_SHOWN = 300


def emulator_endpoint(endpoint_url: str | None) -> str | None:
    """The emulator's URL: the tier's ``endpoint_url``, else ``STORAGE_EMULATOR_HOST``, else None."""
    if endpoint_url:
        return endpoint_url.rstrip("/")
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if not host:
        return None
    return (host if "://" in host else f"http://{host}").rstrip("/")


@contextmanager
def gcs_errors(where: str) -> Iterator[None]:
    """Translate httpx's transport errors met in the block into tierd errors."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise TransientBackendError(f"{where}: timed out ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise TransientBackendError(f"{where}: {type(exc).__name__}: {exc}") from exc


def raise_for(response: httpx.Response, where: str) -> None:
    """Raise the tierd error for a response that is not 2xx (or 308, a resumable upload's reply)."""
    status = response.status_code
    if status < 300 or status == 308:
        return
    _raise(status, _message(response), where)


def raise_status(status: int, body: str, where: str) -> None:
    """``raise_for`` for an answer of ``status`` whose body (JSON error or text) is ``body``."""
    if status < 300 or status == 308:
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        text = str(parsed["error"].get("message", ""))[:BODY_SHOWN]
    else:
        text = body[:BODY_SHOWN]
    _raise(status, text, where)


def _raise(status: int, text: str, where: str) -> None:
    if status in (404, 410):
        raise NotFound(f"{where}: not found ({status})")
    if status == 400 and _CHECKSUM_REFUSED.search(text):
        raise IntegrityError(f"{where}: GCS refused the bytes: {text}")
    if status in (408, 429) or status >= 500:
        raise TransientBackendError(f"{where}: GCS answered {status}: {text}")
    raise PermanentBackendError(f"{where}: GCS answered {status}: {text}")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return response.text[:BODY_SHOWN]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", ""))[:BODY_SHOWN]
    return json.dumps(body)[:BODY_SHOWN]


class GcsClient:
    """One bucket's JSON API: an httpx client, its credentials, and its URLs."""

    def __init__(
        self, endpoint: str, bucket: str, credentials: Credentials, *, verify_tls: bool, pool: int
    ) -> None:
        self.endpoint, self.bucket, self.credentials = endpoint, bucket, credentials
        self.http = httpx.AsyncClient(
            verify=verify_tls,
            timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        )
        bucket_part = quote(bucket, safe="")
        self.objects_url = f"{endpoint}/storage/v1/b/{bucket_part}/o"
        self.upload_url = f"{endpoint}/upload/storage/v1/b/{bucket_part}/o"

    def object_url(self, name: str) -> str:
        """The JSON API URL of the object ``name``."""
        return f"{self.objects_url}/{quote(name, safe='')}"

    async def request(
        self, method: str, url: str, where: str, *, ok404: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """Send one request with the credentials' headers; raises tierd errors (``raise_for``).

        ``ok404``: a 404 is returned, not raised.
        """
        headers = {**kwargs.pop("headers", {}), **await self.credentials.headers(self.http)}
        with gcs_errors(where):
            response = await self.http.request(method, url, headers=headers, **kwargs)
        if not (ok404 and response.status_code == 404):
            raise_for(response, where)
        return response

    async def close(self) -> None:
        """Close the connections."""
        await self.http.aclose()
