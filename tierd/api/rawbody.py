"""A request body read straight off its connection's socket: the peer upload's path for big files.

Through the ASGI server every byte of a body is copied four times (h11's buffer, its event,
uvicorn's body, the bytes handed to the app) in 256 KiB pieces, each a trip through the
event loop: with the route's own copy, py-spy put most of a receiving daemon's 5 CPU-s per
GiB there. ``TrackedProtocol`` (uvicorn's own HTTP/1.1 protocol, which ``ApiService`` serves
with) records each open connection's transport by its two addresses, which a request's scope
names (``server``, ``client``), so ``raw_body`` can find it.

``raw_body`` takes the body over only when nothing of it can have reached the server yet: the
connection is plain TCP (over TLS the socket carries ciphertext: the body goes through the
server as before) and the sender asked ``Expect: 100-continue`` (it sends no byte before the
answer ``100 Continue``, which ``RawBody.take`` writes once the server stops reading the
socket). The connection is closed after the answer (``Connection: close``): the server never
saw the body, so it cannot parse what would follow it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_local_addr, get_remote_addr

__all__ = ["CLOSE", "RawBody", "TrackedProtocol", "open_connections", "raw_body"]

#: The header every answer to a request whose body was taken over carries.
CLOSE = {"Connection": "close"}
_Key = tuple[Any, Any]
_OPEN: dict[_Key, asyncio.Transport] = {}


class TrackedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol (h11: what ``auto`` picks without httptools), its transport recorded."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Serve the connection; record its transport."""
        super().connection_made(transport)
        self._tierd_key = (get_local_addr(transport), get_remote_addr(transport))
        _OPEN[self._tierd_key] = transport

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the transport; the server's own handling."""
        _OPEN.pop(getattr(self, "_tierd_key", None), None)  # type: ignore[arg-type]
        super().connection_lost(exc)


def open_connections() -> int:
    """How many connections are recorded (for tests: none is left once its server stopped)."""
    return len(_OPEN)


class RawBody:
    """A request's body, to be read off its connection's socket (``take``), in order."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._sock: socket.socket | None = None

    def take(self) -> socket.socket:
        """Stop the server reading, ask the sender for the body; a socket of the connection to read it from.

        The socket is this object's: ``close`` releases it (the connection stays the server's).
        """
        assert self._sock is None
        self._transport.pause_reading()
        shared = self._transport.get_extra_info("socket")
        self._sock = socket.socket(fileno=os.dup(shared.fileno()))
        self._sock.setblocking(False)
        self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return self._sock

    def close(self) -> None:
        """Release the socket ``take`` made (the server closes the connection after its answer)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def raw_body(request: Request) -> RawBody | None:
    """The request's body as a RawBody, when it may be taken over (see the module docstring); else None."""
    if request.headers.get("expect", "").lower() != "100-continue":
        return None
    transport = _OPEN.get((request.scope.get("server"), request.scope.get("client")))
    if transport is None or transport.is_closing() or transport.get_extra_info("sslcontext") is not None:
        return None
    return RawBody(transport)
