"""The data path's requests on tierd's own connections (``httpwire``): media GETs and uploads.

httpx spends more CPU and latency per request than aiohttp (measured against the emulator,
one 30 KB media GET after another: a median of 26 ms against 14 ms on a loaded 2-core
machine), and aiohttp more than ``httpwire``'s streams (``httpwire`` has the measurement); a
checkpoint's thousands of small objects are one request each, a media GET down and a
multipart upload up (on aiohttp, the upload of 1,000 objects of 4-64 KiB took 0.71-0.81 ms of
the event loop's CPU per object, on ``httpwire`` 0.59-0.61 ms: 3 alternating runs, load 14).
The JSON API's other calls (metadata, listings, resumable sessions, deletes, tokens) stay on
the ``GcsClient``'s httpx client. Errors are those of ``client.raise_status``; connection
errors, timeouts and cut bodies are TransientBackendError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from tierd.daemon.backends.gcs.client import BODY_SHOWN, raise_status
from tierd.daemon.backends.httpwire import Answer, Body, WirePool

if TYPE_CHECKING:
    from tierd.daemon.backends.gcs.client import GcsClient

__all__ = ["MediaSession", "refuse"]


def refuse(answer: Answer, text: str, where: str) -> None:
    """A media request's answer outside 2xx as the tierd error ``client.raise_status`` names."""
    raise_status(answer.status, text[: BODY_SHOWN * 10], where)


class MediaSession:
    """One ``GcsClient``'s media GETs and uploads, on one ``WirePool``."""

    def __init__(self, client: GcsClient, *, connections: int, verify_tls: bool) -> None:
        self.client = client
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
        async with self.send("GET", url, where, params=params, headers=headers, passing=passing) as answer:
            yield answer

    @asynccontextmanager
    async def send(
        self,
        method: str,
        url: str,
        where: str,
        *,
        params: Mapping[str, str],
        headers: Mapping[str, str] | None = None,
        body: Body = None,
        passing: frozenset[int] = frozenset(),
    ) -> AsyncIterator[Answer]:
        """One request with the credentials' headers and ``body``; yields a 2xx answer (or in ``passing``).

        Raises as ``WirePool.request``.
        """
        sent = {**(headers or {}), **await self.client.credentials.headers(self.client.http)}
        target = f"{url}?{urlencode(dict(params))}"
        async with self.wire.request(method, target, where, sent, body, passing=passing) as answer:
            yield answer

    async def close(self) -> None:
        """Close the kept connections."""
        await self.wire.close()
