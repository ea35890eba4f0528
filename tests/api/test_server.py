"""The API's listening socket: connections it accepts answer without Nagle's delay."""

from __future__ import annotations

import asyncio
import socket

from tierd.api.server import _bind


async def test_accepted_connections_have_tcp_nodelay() -> None:
    """asyncio sets TCP_NODELAY on an accepted connection only when the listening socket names
    IPPROTO_TCP; without it each answer after the first on a kept-alive connection waited for
    the client's delayed ACK (~40 ms)."""
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[int] = loop.create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await loop.create_server(Probe, sock=_bind("127.0.0.1", 0))
    try:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(accepted, 10) == 1
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
