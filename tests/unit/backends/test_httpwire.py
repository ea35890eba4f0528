"""The GETs' own HTTP/1.1 client (``httpwire``) against a scripted real server.

Each path of the server answers with the bytes a test gives it: kept connections, chunked
bodies, HTTP/1.0 and ``Connection: close``, bodies cut short, a kept connection the server
closed meanwhile, malformed and oversized heads, error answers, and TLS.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from tierd.daemon.backends.gcs.media import refuse
from tierd.daemon.backends.httpwire import HEAD_LIMIT, SEND_SLICE, WirePool
from tierd.errors import NotFound, TransientBackendError

#: What a path answers: the raw answer's bytes, and whether the server closes the connection after it.
Script = dict[str, tuple[bytes, bool]]


@dataclass
class Server:
    """A loopback server answering each request's path from ``script``."""

    script: Script
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head)
                self.bodies.append(await reader.readexactly(int(length.group(1))) if length else b"")
                path = head.split(b" ", 2)[1].decode().split("?")[0]
                answer, close = self.script[path]
                writer.write(answer)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def drop_connections(self) -> None:
        """Close every connection from the server's side."""
        for writer in self.writers:
            writer.close()


Start = Callable[[Script], Awaitable[Server]]


@pytest.fixture
async def serve() -> AsyncIterator[Start]:
    """Start a scripted server (closed at teardown)."""
    listeners: list[asyncio.Server] = []

    async def start(script: Script) -> Server:
        server = Server(script)
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        listeners.append(listener)
        server.url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
        return server

    yield start
    for listener in listeners:
        listener.close()


def ok(body: bytes, *, extra: str = "", version: str = "HTTP/1.1") -> bytes:
    return f"{version} 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def fetch(pool: WirePool, url: str, size: int = 100, *, stop: bool = False) -> tuple[int, bytes]:
    buffer = bytearray(size)
    async with pool.get(url, "gs://b/o", {"Range": "bytes=0-99"}) as answer:
        got = await answer.read_into(memoryview(buffer), stop=stop)
    return got, bytes(buffer[: min(got, size)])


async def test_a_kept_connection_serves_the_next_get(serve: Start) -> None:
    server = await serve({"/a": (ok(b"x" * 100), False), "/b": (ok(b"y" * 60), False)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        assert await fetch(pool, f"{server.url}/a") == (100, b"x" * 100)
        assert await fetch(pool, f"{server.url}/b") == (60, b"y" * 60)
        assert server.connections == 1
        assert server.requests[0].startswith(b"GET /a HTTP/1.1\r\n")
        assert b"\r\nRange: bytes=0-99\r\n" in server.requests[0]
    finally:
        await pool.close()


@pytest.mark.parametrize(
    "answer",
    [ok(b"z" * 10, version="HTTP/1.0"), ok(b"z" * 10, extra="Connection: close\r\n")],
    ids=["http-1.0", "connection-close"],
)
async def test_an_answer_that_ends_its_connection_is_not_kept(serve: Start, answer: bytes) -> None:
    server = await serve({"/a": (answer, True)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        for _ in range(3):
            assert await fetch(pool, f"{server.url}/a") == (10, b"z" * 10)
        assert server.connections == 3
    finally:
        await pool.close()


async def test_a_body_to_the_connections_end_and_a_chunked_body(serve: Start) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    until_close = b"HTTP/1.1 200 OK\r\n\r\n" + b"q" * 70
    server = await serve({"/c": (chunked, False), "/u": (until_close, True)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        assert await fetch(pool, f"{server.url}/c") == (11, b"hello world")
        assert await fetch(pool, f"{server.url}/c") == (11, b"hello world")
        assert server.connections == 1  # a chunked body read to its end keeps the connection
        assert await fetch(pool, f"{server.url}/u") == (70, b"q" * 70)
    finally:
        await pool.close()


async def test_a_longer_body_is_counted_or_left_and_then_not_kept(serve: Start) -> None:
    server = await serve({"/a": (ok(b"0123456789" * 20), False)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        assert await fetch(pool, f"{server.url}/a", 100, stop=False) == (200, b"0123456789" * 10)
        assert await fetch(pool, f"{server.url}/a", 100, stop=True) == (100, b"0123456789" * 10)
        assert await fetch(pool, f"{server.url}/a", 100, stop=True) == (100, b"0123456789" * 10)
        assert server.connections == 2  # the body left half read closed its connection
    finally:
        await pool.close()


async def test_a_body_cut_short_is_transient(serve: Start) -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 40
    server = await serve({"/a": (cut, True)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        with pytest.raises(TransientBackendError, match="gs://b/o: the answer's body was cut short"):
            await fetch(pool, f"{server.url}/a")
    finally:
        await pool.close()


async def test_a_kept_connection_the_server_closed_is_opened_again(serve: Start) -> None:
    server = await serve({"/a": (ok(b"k" * 100), False)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        assert await fetch(pool, f"{server.url}/a") == (100, b"k" * 100)
        server.drop_connections()
        await asyncio.sleep(0)  # the server's close is sent; the client has not read it yet
        assert await fetch(pool, f"{server.url}/a") == (100, b"k" * 100)
        assert server.connections == 2
    finally:
        await pool.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"SPDY/9 200 OK\r\n\r\n", "a malformed answer"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * HEAD_LIMIT + b"\r\n\r\n", "LimitOverrunError"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", "a malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "a malformed chunk size"),
        (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", "503: busy"),
    ],
    ids=["status-line", "head-too-long", "content-length", "chunk-size", "503"],
)
async def test_a_malformed_or_refused_answer_is_transient_and_names_the_object(
    serve: Start, answer: bytes, message: str
) -> None:
    server = await serve({"/a": (answer, True)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        with pytest.raises(TransientBackendError, match=f"gs://b/o: .*{message}"):
            await fetch(pool, f"{server.url}/a")
    finally:
        await pool.close()


async def test_a_404_is_not_found_and_an_answer_in_passing_is_yielded(serve: Start) -> None:
    missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNo such o"
    server = await serve({"/a": (missing, False)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        with pytest.raises(NotFound, match="gs://b/o: not found"):
            await fetch(pool, f"{server.url}/a")
        async with pool.get(f"{server.url}/a", "gs://b/o", {}, passing=frozenset({404})) as answer:
            assert (answer.status, answer.headers["content-length"]) == (404, "9")
    finally:
        await pool.close()


async def test_a_header_with_a_line_break_or_a_foreign_url_is_refused(serve: Start) -> None:
    server = await serve({})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    with pytest.raises(ValueError, match="line break"):
        async with pool.get(f"{server.url}/a", "gs://b/o", {"Range": "bytes=0-1\r\nX-Evil: 1"}):
            pass
    with pytest.raises(ValueError, match="not under"):
        async with pool.get("http://elsewhere.example/a", "gs://b/o", {}):
            pass
    assert server.connections == 0


async def test_an_https_endpoint_is_spoken_over_tls() -> None:
    """A certificate of a throwaway CA: taken with ``verify_tls: false``, refused with it."""
    import ssl

    import trustme

    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server = Server({"/a": (ok(b"s" * 100), False)})
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=context)
    url = f"https://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    unverified = WirePool(url, connections=4, verify_tls=False, refuse=refuse)
    verified = WirePool(url, connections=4, verify_tls=True, refuse=refuse)
    try:
        assert await fetch(unverified, f"{url}/a") == (100, b"s" * 100)
        with pytest.raises(TransientBackendError, match=r"gs://b/o: connecting: .*CERTIFICATE_VERIFY_FAILED"):
            await fetch(verified, f"{url}/a")
    finally:
        await unverified.close()
        await verified.close()
        listener.close()


async def test_a_put_sends_its_body_whole_after_its_head_and_again_on_a_new_connection(serve: Start) -> None:
    created = b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
    server = await serve({"/p": (created, False)})
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    body = memoryview(bytes(range(256)) * (SEND_SLICE // 256 + 3))  # more than one slice
    try:
        for _ in range(2):
            async with pool.request("PUT", f"{server.url}/p", "gs://b/o", {"X-A": "1"}, body) as answer:
                assert (answer.status, answer.finished) == (201, True)
        assert server.connections == 1
        server.drop_connections()
        await asyncio.sleep(0)
        async with pool.request("POST", f"{server.url}/p", "gs://b/o", {}, (b"<", body[:5], b">")) as answer:
            assert answer.status == 201
        assert server.connections == 2  # the kept one was closed: sent again on a new one
        assert server.requests[0].startswith(b"PUT /p HTTP/1.1\r\n")
        assert f"\r\nContent-Length: {len(body)}\r\n".encode() in server.requests[0]
        assert b"\r\nContent-Length: 7\r\n" in server.requests[2]
        assert server.bodies == [bytes(body), bytes(body), b"<" + bytes(body[:5]) + b">"]
    finally:
        await pool.close()


async def test_a_head_request_is_refused(serve: Start) -> None:
    server = await serve({})
    pool = WirePool(server.url, connections=1, verify_tls=True, refuse=refuse)
    with pytest.raises(ValueError, match="HEAD"):
        async with pool.request("HEAD", f"{server.url}/a", "gs://b/o", {}):
            pass


async def test_a_whole_answer_is_read_up_to_its_bound(serve: Start) -> None:
    server = await serve({"/r": (ok(b'{"name": "o"}'), False)})
    pool = WirePool(server.url, connections=1, verify_tls=True, refuse=refuse)
    try:
        async with pool.get(f"{server.url}/r", "gs://b/o", {}) as answer:
            assert await answer.whole(13) == b'{"name": "o"}'
        async with pool.get(f"{server.url}/r", "gs://b/o", {}) as answer:
            with pytest.raises(TransientBackendError, match="gs://b/o: the answer runs past 12 bytes"):
                await answer.whole(12)
    finally:
        await pool.close()


async def test_a_request_cancelled_on_a_kept_connection_closes_it(serve: Start) -> None:
    """Not left open for the garbage collector (``unclosed <StreamWriter>``), nor kept."""
    server = await serve({"/a": (ok(b"x" * 100), False), "/hang": (b"", False)})  # /hang: no answer
    pool = WirePool(server.url, connections=4, verify_tls=True, refuse=refuse)
    try:
        await fetch(pool, f"{server.url}/a")
        (kept,) = pool.idle
        task = asyncio.create_task(fetch(pool, f"{server.url}/hang"))
        while len(server.requests) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.idle == []
        assert kept.writer.is_closing()
    finally:
        await pool.close()
