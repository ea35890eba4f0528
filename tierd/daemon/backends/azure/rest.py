"""Every request of an Azure tier, signed and sent straight: blob GETs on ``httpwire``, the rest on aiohttp.

The SDK runs each request through azure-core's pipeline (a dozen policies, its response
deserialised into models) and reads a download whole before handing it over; for a
checkpoint's thousands of blobs and its 8 MiB ranges that cost more CPU than the bytes. Here
a request is signed and sent as it is, a download's body is copied straight into the
caller's budgeted buffer as it arrives, and an upload's body is that buffer itself. The
other calls (properties, block lists, deletes, listings: ``azure.calls``) go on it too.
A blob's GET (``get``) and a Put Blob or Put Block (``put``) go on ``httpwire``'s kept
connections instead: against Azurite, 1,000 blobs of 4-64 KiB (3 alternating runs each,
load 5-10) took 0.30-0.33 ms of the event loop's CPU per blob downloaded on aiohttp and
0.25-0.26 ms on ``httpwire``, and 0.46-0.49 ms per blob uploaded against 0.30-0.32 ms.

Credentials, as the SDK's client has them: Shared Key (each request signed with the
account key, HMAC-SHA256 over the canonical request), a SAS token (appended to the query),
or a bearer token from the identity chain (``get_token``, renewed five minutes before it
expires). Errors: a status from 300 up becomes the tierd error ``errors.answer_error``
names from the status and ``x-ms-error-code``; connection errors, timeouts and cut bodies
become TransientBackendError (``errors.azure_errors``). No request is retried here: the
file level (``tierd.daemon.transfer.retry``) does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from email.utils import formatdate
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from yarl import URL

from tierd import __version__
from tierd.daemon.backends.azure.errors import answer_error, azure_errors
from tierd.daemon.backends.httpwire import Answer, WirePool

__all__ = ["API_VERSION", "AzureRest", "Signer", "header_order"]

#: The REST API version every request names (CRC64 on Put Block and Put Blob since 2019-02-02).
API_VERSION = "2025-11-05"
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 120
#: What of an error body is read for its code and message.
ERROR_BODY = 4096
STORAGE_SCOPE = "https://storage.azure.com/.default"
TOKEN_MARGIN = 300.0
USER_AGENT = f"tierd/{__version__}"


def header_order(item: tuple[str, str]) -> tuple[str, str]:
    """Where an ``x-ms-`` header goes in the canonical headers: the service's collation.

    The service compares names with hyphens weighing nothing at first and ``_`` before
    digits and letters (the SDK emulates it with a weight table); header and metadata names
    hold only lower-case letters, digits, hyphens and (metadata) ``_``, for which this key
    gives the same order.
    """
    name = item[0]
    return name.replace("-", "").replace("_", " "), name


class Signer:
    """Authorises a request with the tier's credential, as the SDK's client does."""

    def __init__(self, account: str, credential: Any) -> None:
        self.account, self.credential = account, credential
        self._token: tuple[str, float] | None = None

    async def authorise(self, method: str, url: URL, headers: dict[str, str]) -> URL:
        """Add ``Authorization`` to ``headers`` (Shared Key, bearer), or the SAS to the URL."""
        if isinstance(self.credential, AzureNamedKeyCredential):
            headers["Authorization"] = self._shared_key(method, url, headers)
        elif isinstance(self.credential, AzureSasCredential):
            sas = self.credential.signature.lstrip("?")
            url = URL(f"{url}{'&' if url.raw_query_string else '?'}{sas}", encoded=True)
        else:
            headers["Authorization"] = f"Bearer {await self._bearer()}"
        return url

    def _shared_key(self, method: str, url: URL, headers: Mapping[str, str]) -> str:
        """``SharedKey account:signature`` over the canonical request (the 2009-09-19+ scheme)."""
        fields = {name.lower(): value for name, value in headers.items()}
        length = fields.get("content-length", "")
        standard = [
            method,
            fields.get("content-encoding", ""),
            fields.get("content-language", ""),
            "" if length == "0" else length,
            fields.get("content-md5", ""),
            fields.get("content-type", ""),
            "",  # Date: x-ms-date is sent instead
            fields.get("if-modified-since", ""),
            fields.get("if-match", ""),
            fields.get("if-none-match", ""),
            fields.get("if-unmodified-since", ""),
            fields.get("range", ""),
        ]
        ms = sorted(((k, v) for k, v in fields.items() if k.startswith("x-ms-")), key=header_order)
        canonical_headers = "".join(f"{name}:{value}\n" for name, value in ms)
        resource = f"/{self.account}{url.raw_path}"
        query = sorted((k.lower(), unquote(v)) for k, v in url.query.items())
        resource += "".join(f"\n{k}:{v}" for k, v in query)
        text = "\n".join(standard) + "\n" + canonical_headers + resource
        key = base64.b64decode(self.credential.named_key.key)
        digest = hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()
        return f"SharedKey {self.account}:{base64.b64encode(digest).decode('ascii')}"

    async def _bearer(self) -> str:
        if self._token is None or self._token[1] - TOKEN_MARGIN < time.time():
            token = await self.credential.get_token(STORAGE_SCOPE)
            self._token = (token.token, float(token.expires_on))
        return self._token[0]


class AzureRest:
    """One container's blobs over one aiohttp session (made on first use, in the running loop)."""

    def __init__(self, base_url: str, container: str, signer: Signer, *, connections: int) -> None:
        self.base, self.container, self.signer = base_url.rstrip("/"), container, signer
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None
        self.wire = WirePool(self.base, connections=connections, verify_tls=True, refuse=refuse)
        self._date = (0, "")

    def session(self) -> aiohttp.ClientSession:
        """The session, made on first use."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ttl_dns_cache=300),
                timeout=aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT),
                auto_decompress=False,
                skip_auto_headers=("Content-Type",),
            )
        return self._session

    def url(self, name: str, query: str = "") -> URL:
        """The blob's URL (name quoted as the SDK quotes it; "": the container's), ``query`` encoded."""
        path = f"{self.base}/{self.container}" + (f"/{quote(name, safe='~/')}" if name else "")
        return URL(f"{path}?{query}" if query else path, encoded=True)

    @asynccontextmanager
    async def send(
        self,
        method: str,
        name: str,
        action: str,
        location: str,
        *,
        query: str = "",
        headers: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send one signed request; yields a 2xx response whose body the caller reads.

        Raises the tierd error of any other answer (``errors.answer_error``) and
        TransientBackendError for connection errors, timeouts and cut bodies.
        """
        sent = self._sent(method, headers, None if body is None else len(body))
        sent["User-Agent"] = USER_AGENT
        url = await self.signer.authorise(method, self.url(name, query), sent)
        where = f"{action} {location}"
        with azure_errors(action, location):
            async with self.session().request(method, url, headers=sent, data=body) as response:
                if response.status >= 300:
                    text = (await response.content.read(ERROR_BODY)).decode("utf-8", "replace")
                    raise answer_error(
                        response.status, response.headers.get("x-ms-error-code", ""), text, where
                    )
                yield response

    @asynccontextmanager
    async def get(
        self, name: str, action: str, location: str, *, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[Answer]:
        """One signed GET of blob ``name`` on ``httpwire``; yields a 2xx answer whose body the caller reads.

        Raises as ``send``.
        """
        sent = self._sent("GET", headers, None)
        url = await self.signer.authorise("GET", self.url(name), sent)
        async with self.wire.get(str(url), f"{action} {location}", sent) as answer:
            yield answer

    async def put(
        self,
        name: str,
        action: str,
        location: str,
        body: memoryview,
        *,
        query: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """One signed PUT of ``body`` (Put Blob, Put Block) on ``httpwire``; raises as ``send``."""
        sent = self._sent("PUT", headers, len(body))
        url = await self.signer.authorise("PUT", self.url(name, query), sent)
        async with self.wire.request("PUT", str(url), f"{action} {location}", sent, body):
            pass

    def _sent(self, method: str, headers: Mapping[str, str] | None, length: int | None) -> dict[str, str]:
        """The headers a request sends before it is signed: date, version, ``headers``, length."""
        sent = {"x-ms-date": self.date(), "x-ms-version": API_VERSION, **(headers or {})}
        if length is not None:
            sent["Content-Length"] = str(length)
        elif method in ("PUT", "POST"):
            sent["Content-Length"] = "0"
        return sent

    def date(self) -> str:
        """``x-ms-date``'s value now: formatted once a second, not per request."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True))
        return self._date[1]

    async def close(self) -> None:
        """Close the session's connections and the kept GET connections."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self.wire.close()


def refuse(answer: Answer, text: str, where: str) -> None:
    """A GET's answer outside 2xx as the tierd error ``errors.answer_error`` names."""
    raise answer_error(answer.status, answer.headers.get("x-ms-error-code", ""), text, where)
