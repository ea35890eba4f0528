"""A request body read straight off its connection's socket: the peer upload's path for big files.

Through the ASGI server every byte of a body is copied four times (h11's buffer, its event,
uvicorn's body, the bytes handed to the app) in 256 KiB pieces, each a trip through the
event loop, the socket paused and resumed each time: a daemon receiving 1 GiB took 3.8 CPU-s,
py-spy's active samples 51 % in the transport's reads (37 % of all in uvicorn's protocol and h11),
18 % the route's stream and its copy, 13 % hashing and writing. Read off the socket it
took 1.35 CPU-s, a third of it the write (4 x 256 MiB between two processes, load 15-20).
``TrackedProtocol`` (uvicorn's own HTTP/1.1 protocol, which ``ApiService`` serves with)
puts each connection's transport in the scope of the requests that come on it (under
``extensions``), where no header can change it (a scope's ``client`` can be: uvicorn takes
``X-Forwarded-For`` from a local caller), so ``raw_body`` finds the request's own connection.

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

from starlette.requests import Request
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["CLOSE", "EXTENSION", "RawBody", "TrackedProtocol", "raw_body"]

#: The header every answer to a request whose body was taken over carries.
CLOSE = {"Connection": "close"}
EXTENSION = "tierd.connection"


class TrackedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol (h11: ``auto`` without httptools), its transport in each scope."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Serve the connection, its requests' scopes naming its transport."""
        super().connection_made(transport)
        app = self.app

        async def tracked(scope: Scope, receive: Receive, send: Send) -> None:
            scope["extensions"] = {**scope.get("extensions", {}), EXTENSION: transport}
            await app(scope, receive, send)

        self.app = tracked


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
    transport = request.scope.get("extensions", {}).get(EXTENSION)
    if (
        not isinstance(transport, asyncio.Transport)
        or transport.is_closing()
        or transport.get_extra_info("sslcontext") is not None
    ):
        return None
    return RawBody(transport)
