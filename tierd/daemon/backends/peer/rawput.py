"""A file sent to a peer's ``PUT`` over a plain-HTTP connection of its own, its body by ``os.sendfile``.

Through httpx every byte went from the file to a budget buffer (a trip to the I/O pool per
1 MiB), then through h11 into the socket: a sender of 1 GiB took 1.5 CPU-s, py-spy's active
samples 54 % in httpx/httpcore/h11 and the transport's writes, 18 % handing reads to the
pool. By ``sendfile`` it took 0.3 CPU-s (4 x 256 MiB between two processes, load 15-20).
The kernel copies the file to the socket; no byte of the body passes through this process
(the holder hashes what arrives against the checksum taken at first sight, so a byte
changed anywhere is refused there all the same).

One connection per file: the head asks ``Expect: 100-continue``, so a peer that refuses the
file (its token, its room, its slots) answers before a byte of the body is sent, and one
that takes it reads the body straight off the connection (``tierd.api.rawbody``), which it
closes after its answer. The body goes in pieces of ``PIECE`` bytes, each paced first (the
tier's bandwidth limit, in the grain the sends through httpx pay it). Only for ``http://``
peers: over TLS the bytes must pass
through this process to be encrypted, and ``PeerClient`` sends them as before.

Errors: ``Unreached`` (OSError: refused, reset, timed out, an answer that is not HTTP) and
IntegrityError (the file ended before its size: it changed since it was recorded).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import urlsplit

from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.httphead import encode_head
from tierd.errors import IntegrityError

__all__ = ["ANSWER_LIMIT", "PIECE", "Answer", "Unreached", "put_file"]

#: Bytes of the body paced at a time.
PIECE = 1 * MIB
#: The most bytes of an answer's head and body read (a problem detail is a few hundred).
ANSWER_LIMIT = 64 * 1024
Pace = Callable[[int], Awaitable[None]]
Answer = tuple[int, bytes]


class Unreached(OSError):
    """The peer could not be reached, left, stalled, or did not answer in HTTP."""


async def put_file(
    url: str,
    headers: Mapping[str, str],
    fd: int,
    size: int,
    *,
    pace: Pace | None = None,
    timeout: float = 60.0,
    connect_timeout: float = 10.0,
) -> Answer:
    """PUT ``size`` bytes of the open file ``fd`` at ``url``; the final answer's status and body.

    Raises Unreached, or IntegrityError when the file is shorter than ``size``.
    """
    target = urlsplit(url)
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(target.hostname, target.port or 80, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            async with asyncio.timeout(connect_timeout):
                await loop.sock_connect(sock, address)
            head = _head(target.path or "/", target.netloc, headers, size)
            await loop.sock_sendall(sock, head)
            answers = _Answers(sock, timeout)
            status, body = await answers.next()
            if status != 100:
                return status, body
            try:
                await _send_body(sock, fd, size, pace, timeout)
            except OSError:  # the peer gave up on the body: its answer says why, if it sent one
                return await answers.next()
            return await answers.next()
        except (OSError, TimeoutError, ValueError) as exc:
            raise Unreached(f"{type(exc).__name__}: {exc}") from exc


def _head(path: str, host: str, headers: Mapping[str, str], size: int) -> bytes:
    lines = [f"PUT {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {size}", "Expect: 100-continue"]
    return encode_head(lines, headers)


async def _send_body(sock: socket.socket, fd: int, size: int, pace: Pace | None, timeout: float) -> None:
    """The file's ``size`` bytes from offset 0 to ``sock``, by the kernel, ``PIECE`` at a time."""
    offset = 0
    while offset < size:
        length = min(PIECE, size - offset)
        if pace is not None:
            await pace(length)
        end = offset + length
        while offset < end:
            try:
                sent = os.sendfile(sock.fileno(), fd, offset, end - offset)
            except BlockingIOError:
                await _writable(sock, timeout)
                continue
            if sent == 0:
                raise IntegrityError(f"the file ended at byte {offset} of {size} (changed since recorded)")
            offset += sent


async def _writable(sock: socket.socket, timeout: float) -> None:
    """Return once ``sock`` takes more bytes; TimeoutError after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_writer(sock.fileno(), ready.set_result, None)
    try:
        async with asyncio.timeout(timeout):
            await ready
    finally:
        loop.remove_writer(sock.fileno())


class _Answers:
    """The answers read off a connection: status and body of each (bounded by ``ANSWER_LIMIT``)."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout
        self._buffer = bytearray()

    async def _more(self) -> None:
        async with asyncio.timeout(self._timeout):
            piece = await asyncio.get_running_loop().sock_recv(self._sock, ANSWER_LIMIT)
        if not piece:
            raise ConnectionResetError("the peer closed the connection before its answer")
        self._buffer += piece
        if len(self._buffer) > 2 * ANSWER_LIMIT:
            raise ValueError(f"an answer longer than {ANSWER_LIMIT} bytes")

    async def next(self) -> Answer:
        """The next answer (a 100 Continue has no body). Raises OSError, TimeoutError, ValueError."""
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            await self._more()
        lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
        fields = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
        length = {k.strip().lower(): v.strip() for k, v in fields.items()}.get("content-length", "0")
        if not length.isdigit() or int(length) > ANSWER_LIMIT:
            raise ValueError(f"an answer's Content-Length {length[:20]!r} (at most {ANSWER_LIMIT})")
        while len(self._buffer) < int(length):
            await self._more()
        body = bytes(self._buffer[: int(length)])
        del self._buffer[: int(length)]
        return int(parts[1]), body
