"""GETs on tierd's own HTTP/1.1 connections (asyncio streams, no aiohttp): GCS media and Azure blobs.

A checkpoint's thousands of small objects are one GET each, and the GET's own cost is what
a download of them spends: against gcp-storage-emulator (HTTP/1.0, a connection per
answer), aiohttp spent 1.1 ms of CPU per 20 KB GET, half of it making the connection, and
this client 0.5 ms (2,000 GETs, 16 at a time, on a loaded 2-core machine), and took half
the time. Against Azurite (HTTP/1.1, kept connections) the download of 1,000 blobs of 4-64
KiB spent 0.30-0.33 ms of its event loop's CPU per blob on aiohttp, 0.25-0.26 ms here.
Only what a GET, a PUT or a GCS upload needs: a request with a body of known length or
none, a status line, headers, and a body framed by Content-Length, chunked, or the
connection's end.

A connection is kept for the next GET when the answer was HTTP/1.1 without ``Connection:
close`` and its body was read to its end; anything else closes it. A kept connection the
server closed meanwhile is opened again once, when it failed before any byte of the answer.
Every read waits at most ``READ_TIMEOUT`` and a connection at most ``CONNECT_TIMEOUT``;
the answer's head is bounded (``HEAD_LIMIT``). Errors: the pool's ``refuse`` (the store's
own mapping) for an answer not in 2xx (or ``passing``); TransientBackendError for
connection errors, timeouts, a malformed answer, and a body cut short of its declared length.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tierd.daemon.backends.httphead import encode_head
from tierd.errors import TransientBackendError

__all__ = [
    "Body",
    "CONNECT_TIMEOUT",
    "HEAD_LIMIT",
    "READ_TIMEOUT",
    "SEND_SLICE",
    "Answer",
    "Refusal",
    "Request",
    "WirePool",
]

#: Seconds to wait for a connection, and for each read of an answer.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 120.0
#: The longest answer head (status line and headers) read, and the longest chunk-size line.
HEAD_LIMIT = 64 * 1024
#: What one read of a body asks the stream for at most, when the caller's buffer is full.
PIECE = 256 * 1024
#: What of a body is written before waiting for the connection to take it (the transport
#: copies what the socket did not take at once: at most this much per connection).
SEND_SLICE = 1024 * 1024
#: How much of an error answer's body is read for its message.
ERROR_BODY = 64 * 1024
_NO_BODY = frozenset({204, 304})
_TRANSPORT_ERRORS = (OSError, EOFError, asyncio.LimitOverrunError)


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True)
class Request:
    """A request as sent: its head's bytes and its body's parts, sent one after another."""

    head: bytes
    body: tuple[memoryview, ...] = ()


@dataclass
class Answer:
    """An answer's status, headers (names lower-cased) and body, read with ``read_into``."""

    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader
    where: str
    #: Body bytes still to come: a count (Content-Length, or the current chunk's rest), or
    #: None when the body runs to the connection's end.
    remaining: int | None = None
    chunked: bool = False
    finished: bool = False
    keep_alive: bool = False
    _started: bool = field(default=False, repr=False)

    async def read_into(self, view: memoryview, *, stop: bool) -> int:
        """Copy the body into ``view``; how many bytes came.

        A body longer than ``view``: with ``stop`` the rest is left unread (the count is what
        fit); else it is read to its end and counted, its excess dropped. Raises
        TransientBackendError when the body is cut short of its framing.
        """
        got = 0
        while True:
            room = len(view) - got
            if stop and room <= 0:
                break
            piece = await self.read(room if room > 0 else PIECE)
            if not piece:
                break
            take = max(0, min(len(piece), room))
            view[got : got + take] = piece[:take]
            got += len(piece)
        return got

    async def read(self, most: int) -> bytes:
        """Up to ``most`` bytes of the body (b"" at its end)."""
        if self.finished:
            return b""
        if self.chunked and self.remaining == 0:
            await self._next_chunk()
            if self.finished:
                return b""
        limit = most if self.remaining is None else min(most, self.remaining)
        piece = await _timed(self.reader.read(limit))
        if self.remaining is None:
            self.finished = not piece
            return piece
        if not piece:
            raise TransientBackendError(f"{self.where}: the answer's body was cut short")
        self.remaining -= len(piece)
        if self.remaining == 0 and not self.chunked:
            self.finished = True
        if self.remaining == 0 and self.chunked:
            await self._line()  # the CRLF after a chunk's data
        return piece

    async def _next_chunk(self) -> None:
        size_text = (await self._line()).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise TransientBackendError(f"{self.where}: a malformed chunk size {size_text[:40]!r}") from None
        if size:
            self.remaining = size
            return
        while await self._line():  # trailers, up to the empty line
            pass
        self.finished = True

    async def _line(self) -> bytes:
        line = await _timed(self.reader.readuntil(b"\n"))
        return line.rstrip(b"\r\n")

    async def fill(self, view: memoryview) -> int:
        """Copy the whole body into ``view``; its length. TransientBackendError when longer or cut short."""
        got = await self.read_into(view, stop=True)
        if not self.finished and await self.read(1):
            raise TransientBackendError(f"{self.where}: the answer runs past {len(view)} bytes")
        return got

    async def whole(self, most: int) -> bytes:
        """The whole body, at most ``most`` bytes (``fill``)."""
        buffer = bytearray(most)
        return bytes(buffer[: await self.fill(memoryview(buffer))])

    async def error_text(self) -> str:
        """The start of an error answer's body, as text."""
        buffer = bytearray(ERROR_BODY)
        got = await self.read_into(memoryview(buffer), stop=True)
        return bytes(buffer[:got]).decode("utf-8", "replace")


#: A request's body: none, a buffer, or buffers sent one after another.
Body = bytes | memoryview | Sequence[bytes | memoryview] | None

#: What a pool does with an answer outside 2xx and ``passing``: (answer, the start of its body
#: as text, where) -> raises the store's tierd error (or returns to hand the answer over).
Refusal = Callable[[Answer, str, str], None]


async def _timed(awaitable: Awaitable[bytes]) -> bytes:
    async with asyncio.timeout(READ_TIMEOUT):
        return await awaitable


class WirePool:
    """Kept connections to one endpoint (``scheme://host[:port]``), at most ``connections`` at once.

    ``refuse`` turns an answer outside 2xx into the store's tierd error (``Refusal``).
    """

    def __init__(self, endpoint: str, *, connections: int, verify_tls: bool, refuse: Refusal) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{endpoint}: not an http(s) URL")
        self.endpoint = f"{parts.scheme}://{parts.netloc}"
        self.host, self.netloc = parts.hostname, parts.netloc
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls = _tls_context(verify_tls) if parts.scheme == "https" else None
        self.slots = asyncio.Semaphore(connections)
        self.idle: list[_Connection] = []
        self.refuse = refuse

    @contextlib.asynccontextmanager
    async def get(
        self, url: str, where: str, headers: Mapping[str, str], *, passing: frozenset[int] = frozenset()
    ) -> AsyncIterator[Answer]:
        """One GET of ``url`` (under this pool's endpoint); yields a 2xx answer (or one in ``passing``).

        Raises the tierd error of any other answer (the pool's ``refuse``) and
        TransientBackendError for connection errors, timeouts and malformed answers.
        """
        async with self.request("GET", url, where, headers, passing=passing) as answer:
            yield answer

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        url: str,
        where: str,
        headers: Mapping[str, str],
        body: Body = None,
        *,
        passing: frozenset[int] = frozenset(),
    ) -> AsyncIterator[Answer]:
        """One request of ``method`` (not HEAD: its answer has no body) with ``body``; as ``get``.

        A body (a buffer, or buffers sent one after another, none copied) is sent whole after
        the head (``Content-Length`` added when ``headers`` lack it), again whole on a new
        connection when a kept one fails before its answer began: only for requests that may
        be sent twice (a GET, a PUT or an upload of the same bytes).
        """
        if not url.startswith(self.endpoint + "/"):
            raise ValueError(f"{url}: not under {self.endpoint}")
        if method == "HEAD":
            raise ValueError("HEAD: its answer's Content-Length frames no body")
        parts = _parts(body)
        if body is not None and not any(name.lower() == "content-length" for name in headers):
            headers = {**headers, "Content-Length": str(sum(len(part) for part in parts))}
        request = Request(self._head(method, url.removeprefix(self.endpoint), headers), parts)
        async with self.slots:
            connection, answer = await self._exchange(request, where)
            with _dropped_on_error(connection, where):
                if answer.status >= 300 and answer.status not in passing:
                    self.refuse(answer, await answer.error_text(), where)
                yield answer
            self._release(connection, answer)

    def _head(self, method: str, target: str, headers: Mapping[str, str]) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.netloc}", "User-Agent: tierd"]
        return encode_head(lines, headers)

    async def _exchange(self, request: Request, where: str) -> tuple[_Connection, Answer]:
        """Send ``request`` on a kept connection (again on a new one if that one was closed)."""
        while self.idle:
            connection = self.idle.pop()
            try:
                return connection, await self._send(connection, request, where)
            except _TRANSPORT_ERRORS:
                connection.close()  # closed by the server while kept: a new one below
            except BaseException:  # cancelled (a sibling block failed the write): never kept
                connection.close()
                raise
        connection = await self._connect(where)
        with _dropped_on_error(connection, where):
            return connection, await self._send(connection, request, where)

    async def _connect(self, where: str) -> _Connection:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                reader, writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls else None,
                    limit=HEAD_LIMIT,
                )
        except (OSError, TimeoutError) as exc:
            raise TransientBackendError(f"{where}: connecting: {type(exc).__name__}: {exc}") from exc
        return _Connection(reader, writer)

    async def _send(self, connection: _Connection, request: Request, where: str) -> Answer:
        connection.writer.write(request.head)
        for part in request.body:
            for start in range(0, len(part), SEND_SLICE):
                connection.writer.write(part[start : start + SEND_SLICE])
                async with asyncio.timeout(READ_TIMEOUT):
                    await connection.writer.drain()
        head = await _timed(connection.reader.readuntil(b"\r\n\r\n"))
        return _answer(head, connection.reader, where)

    def _release(self, connection: _Connection, answer: Answer) -> None:
        if answer.finished and answer.keep_alive and not connection.reader.at_eof():
            self.idle.append(connection)
        else:
            connection.close()

    async def close(self) -> None:
        """Close the kept connections."""
        idle, self.idle = self.idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            with contextlib.suppress(OSError):
                await connection.writer.wait_closed()


def _answer(head: bytes, reader: asyncio.StreamReader, where: str) -> Answer:
    """The Answer of a head (status line and headers, ending in an empty line)."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    status_text = rest[:3]
    if not version.startswith("HTTP/1.") or not status_text.isdigit():
        raise TransientBackendError(f"{where}: a malformed answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    status = int(status_text)
    answer = Answer(status, headers, reader, where)
    connection = headers.get("connection", "").lower()
    answer.keep_alive = version == "HTTP/1.1" and "close" not in connection
    if status in _NO_BODY or 100 <= status < 200:
        answer.finished = True
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        answer.chunked, answer.remaining = True, 0
    elif "content-length" in headers:
        answer.remaining = _length(headers["content-length"], where)
        answer.finished = answer.remaining == 0
    else:
        answer.keep_alive = False  # the body ends with the connection
    return answer


def _length(text: str, where: str) -> int:
    if not text.isdigit():
        raise TransientBackendError(f"{where}: a malformed Content-Length {text[:40]!r}")
    return int(text)


def _parts(body: Body) -> tuple[memoryview, ...]:
    if body is None:
        return ()
    if isinstance(body, bytes | memoryview):
        return (memoryview(body).cast("B"),)
    return tuple(memoryview(part).cast("B") for part in body)


def _tls_context(verify: bool) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@contextlib.contextmanager
def _dropped_on_error(connection: _Connection, where: str) -> Iterator[None]:
    """Close ``connection`` when the block fails; a transport error comes out as TransientBackendError."""
    try:
        yield
    except _TRANSPORT_ERRORS as exc:
        connection.close()
        raise TransientBackendError(f"{where}: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        connection.close()
        raise
