"""The data path's requests: media GETs on tierd's own connections (``httpwire``), uploads on aiohttp.

httpx spends more CPU and latency per request than aiohttp (measured against the emulator,
one 30 KB media GET after another: a median of 26 ms against 14 ms on a loaded 2-core
machine), and aiohttp more than ``httpwire``'s streams (``httpwire`` has the measurement); a
checkpoint's thousands of small objects are one request each. The JSON API's other calls
(metadata, listings, resumable sessions, deletes, tokens) stay on the ``GcsClient``'s httpx
client. Errors are those of ``client.raise_status``; connection errors, timeouts and cut
bodies are TransientBackendError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import aiohttp
from yarl import URL

from tierd.daemon.backends.gcs.client import BODY_SHOWN, CONNECT_TIMEOUT, READ_TIMEOUT, raise_status
from tierd.daemon.backends.httpwire import Answer, WirePool
from tierd.errors import TransientBackendError

if TYPE_CHECKING:
    from tierd.daemon.backends.gcs.client import GcsClient

__all__ = ["MediaSession", "media_errors", "refuse"]


def refuse(answer: Answer, text: str, where: str) -> None:
    """A media GET's answer outside 2xx as the tierd error ``client.raise_status`` names."""
    raise_status(answer.status, text[: BODY_SHOWN * 10], where)


@contextmanager
def media_errors(where: str) -> Iterator[None]:
    """Aiohttp's transport errors and timeouts met in the block as TransientBackendError."""
    try:
        yield
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        raise TransientBackendError(f"{where}: {type(exc).__name__}: {exc}") from exc


class MediaSession:
    """One ``GcsClient``'s media GETs (a ``WirePool``) and its aiohttp session (made on first use)."""

    def __init__(self, client: GcsClient, *, connections: int, verify_tls: bool) -> None:
        self.client, self.connections, self.verify_tls = client, connections, verify_tls
        self._session: aiohttp.ClientSession | None = None
        self.wire = WirePool(client.endpoint, connections=connections, verify_tls=verify_tls, refuse=refuse)

    @asynccontextmanager
    async def get(
        self,
        url: str,
        where: str,
        *,
        params: Mapping[str, str],
        headers: Mapping[str, str] | None = None,
        passing: frozenset[int] = frozenset(),
    ) -> AsyncIterator[Answer]:
        """One media GET with the credentials' headers; yields a 2xx answer (or one in ``passing``).

        Raises as ``WirePool.get``.
        """
        sent = {**(headers or {}), **await self.client.credentials.headers(self.client.http)}
        async with self.wire.get(f"{url}?{urlencode(dict(params))}", where, sent, passing=passing) as answer:
            yield answer

    def session(self) -> aiohttp.ClientSession:
        """The session, made on first use."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ssl=self.verify_tls),
                timeout=aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT),
                auto_decompress=False,
            )
        return self._session

    @asynccontextmanager
    async def send(
        self,
        method: str,
        url: str,
        where: str,
        *,
        params: Mapping[str, str],
        headers: Mapping[str, str] | None = None,
        data: Any = None,
        passing: frozenset[int] = frozenset(),
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request with the credentials' headers; yields a 2xx answer (or one in ``passing``).

        Raises the tierd error of any other answer (``client.raise_status``) and
        TransientBackendError for connection errors, timeouts and cut bodies.
        """
        sent = {**(headers or {}), **await self.client.credentials.headers(self.client.http)}
        target = URL(f"{url}?{urlencode(dict(params))}", encoded=True)
        with media_errors(where):
            async with self.session().request(method, target, headers=sent, data=data) as response:
                if response.status >= 300 and response.status not in passing:
                    text = (await response.content.read(64 * 1024)).decode("utf-8", "replace")
                    raise_status(response.status, text[: BODY_SHOWN * 10], where)
                yield response

    async def close(self) -> None:
        """Close the session's connections and the kept media GET connections."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self.wire.close()
