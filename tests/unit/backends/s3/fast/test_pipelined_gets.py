"""Pipelined whole-object GETs (``s3.fast.answers``, ``s3.fast.pipelined_gets``).

The parser is fed byte streams directly. ``PipelinedGets`` talks to a scripted HTTP/1.1
server on 127.0.0.1 that answers in order and misbehaves on cue: it closes mid-group,
closes idle connections, stalls, answers with errors, other sizes or chunked bodies.
Against the real stores, ``S3Backend.read_whole`` pipelines on rclone and turns it off
for moto, whose server closes the connection after every answer.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import cast

import pytest
import trustme

from tests.conformance.harness import crc
from tests.fixtures.net import free_port
from tests.fixtures.s3servers import S3Server, TlsFiles, start_rclone
from tierd.daemon.backends import BytesReader, S3Backend, WriteRequest
from tierd.daemon.backends.s3.fast import pipelined_gets as s3pipeline
from tierd.daemon.backends.s3.fast.answers import DIRECT, HEAD_LIMIT, SKIP_LIMIT, AnswerParser
from tierd.daemon.backends.s3.fast.lean import LeanRequests, Prepared
from tierd.daemon.backends.s3.fast.pipelined_gets import PipelinedGets


def answer(
    body: bytes, *, status: str = "206 Partial Content", size: int | None = None, extra: str = ""
) -> bytes:
    """An answer to a GET of a whole object of ``size`` (default: the body's length)."""
    total = len(body) if size is None else size
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n"
    if status.startswith(("200", "206")) and body:
        head += f"Content-Range: bytes 0-{len(body) - 1}/{total}\r\n"
    return (head + extra + "\r\n").encode() + body


def not_found() -> bytes:
    xml = b"<?xml version='1.0'?><Error><Code>NoSuchKey</Code></Error>"
    return answer(xml, status="404 Not Found")


def views_for(*sizes: int) -> list[memoryview]:
    return [memoryview(bytearray(size)) for size in sizes]


def feed(parser: AnswerParser, stream: bytes, step: int) -> None:
    """Feed ``stream`` at most ``step`` bytes at a time, as a socket would deliver it."""
    at = 0
    while at < len(stream) and not parser.done:
        buffer = parser.buffer()
        count = min(step, len(buffer), len(stream) - at)
        buffer[:count] = stream[at : at + count]
        parser.feed(count)
        at += count


# -- the parser ---------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 7, 1000, 1 << 20])
def test_answers_fill_their_views_whatever_the_read_sizes(step: int) -> None:
    bodies = [os.urandom(n) for n in (10, DIRECT * 3 + 5, 1, 5000)]
    stream = b"".join(answer(body) for body in bodies)
    views = views_for(*(len(body) for body in bodies))
    parser = AnswerParser(views)
    feed(parser, stream, step)
    assert parser.filled == [True] * 4
    assert parser.reusable
    assert [bytes(view) for view in views] == bodies


def test_a_200_with_or_without_a_whole_range_is_taken() -> None:
    body = os.urandom(300)
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n" + body
    views = views_for(300, 300)
    parser = AnswerParser(views)
    feed(parser, plain + answer(body, status="200 OK"), 64)  # rclone: 200 with Content-Range
    assert parser.filled == [True, True]
    assert bytes(views[0]) == bytes(views[1]) == body


def test_unplain_answers_are_read_past_and_left_unfilled() -> None:
    good = os.urandom(100)
    stream = (
        not_found()
        + answer(os.urandom(100), size=101)  # the object is bigger than asked
        + answer(os.urandom(99))  # a shorter body
        + b"HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\n\r\n"
        + os.urandom(100)  # no range
        + answer(good)
    )
    views = views_for(100, 100, 100, 100, 100)
    parser = AnswerParser(views)
    feed(parser, stream, 33)
    assert parser.filled == [False, False, False, False, True]
    assert parser.reusable
    assert bytes(views[4]) == good


@pytest.mark.parametrize(
    "bad",
    [
        b"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 206 Partial Content\r\n\r\nhello",  # no length
        b"HTTP/1.1 206 Partial Content\r\nContent-Length: five\r\n\r\nhello",
        b"HTTP/1.1 206 Partial Content\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
        b"SPDY/3 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 206 Partial Content\r\nContent Length : 5\r\n\r\nhello",
        answer(b"x" * (SKIP_LIMIT + 1), status="500 Internal Server Error"),
    ],
)
def test_an_answer_that_cannot_be_framed_or_is_long_to_skip_ends_the_connection(bad: bytes) -> None:
    first = os.urandom(5)
    views = views_for(5, 5, 5)
    parser = AnswerParser(views)
    feed(parser, answer(first) + bad + answer(b"later"), 1 << 20)
    assert parser.ended
    assert not parser.reusable
    assert parser.filled == [True, False, False]
    assert parser.answered == 2  # the bad one counts as answered; the third is to ask again


def test_an_endless_head_ends_the_connection() -> None:
    parser = AnswerParser(views_for(5))
    feed(parser, b"HTTP/1.1 206 Partial Content\r\nX-Junk: " + b"a" * HEAD_LIMIT, 4096)
    assert parser.ended
    assert parser.filled == [False]


@pytest.mark.parametrize(
    ("version", "connection"), [("HTTP/1.1", "close"), ("HTTP/1.0", None), ("HTTP/1.1", "Keep-Alive, Close")]
)
def test_connection_close_ends_after_that_answer(version: str, connection: str | None) -> None:
    head = f"{version} 206 Partial Content\r\nContent-Length: 3\r\nContent-Range: bytes 0-2/3\r\n"
    if connection is not None:
        head += f"Connection: {connection}\r\n"
    parser = AnswerParser(views_for(3, 3))
    feed(parser, head.encode() + b"\r\nabc", 1 << 20)
    assert parser.filled == [True, False]
    assert parser.answered == 1
    assert parser.ended
    assert parser.closed
    assert not parser.reusable


def test_http_1_0_with_keep_alive_stays_open() -> None:
    head = b"HTTP/1.0 206 Partial Content\r\nContent-Length: 3\r\nContent-Range: bytes 0-2/3\r\n"
    head += b"Connection: keep-alive\r\n"
    parser = AnswerParser(views_for(3))
    feed(parser, head + b"\r\nabc", 1 << 20)
    assert parser.filled == [True]
    assert parser.reusable


def test_bytes_past_the_last_answer_make_the_connection_unusable() -> None:
    parser = AnswerParser(views_for(3))
    buffer = parser.buffer()
    stream = answer(b"abc") + b"HTTP/1.1 200 OK\r\n"
    buffer[: len(stream)] = stream
    parser.feed(len(stream))
    assert parser.filled == [True]
    assert parser.extra
    assert not parser.reusable


def ranged(body: bytes, first: int, total: int, status: str = "206 Partial Content") -> bytes:
    """An answer to a GET of ``body``'s bytes from ``first`` of an object of ``total``."""
    last = first + len(body) - 1
    head = (
        f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nContent-Range: bytes {first}-{last}/{total}\r\n"
    )
    return (head + "\r\n").encode() + body


@pytest.mark.parametrize("step", [1, 1000, 1 << 20])
def test_ranged_answers_fill_their_views_from_their_first_bytes(step: int) -> None:
    bodies = [os.urandom(DIRECT * 2), os.urandom(10)]
    stream = ranged(bodies[0], 4096, 1 << 30) + ranged(bodies[1], 0, 10, status="200 OK")
    views = views_for(*(len(body) for body in bodies))
    parser = AnswerParser(views, [4096, 0])
    feed(parser, stream, step)
    assert parser.filled == [True, True]
    assert parser.reusable
    assert [bytes(view) for view in views] == bodies


def test_a_ranged_answer_of_other_bytes_is_left_unfilled() -> None:
    body = os.urandom(100)
    stream = (
        ranged(body, 0, 1000)  # the object's start, not byte 100 on
        + answer(body)  # the whole object (of 100 bytes)
        + b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
        + body  # the range ignored
        + ranged(body, 100, 1000)
    )
    views = views_for(100, 100, 100, 100)
    parser = AnswerParser(views, [100, 100, 100, 100])
    feed(parser, stream, 64)
    assert parser.filled == [False, False, False, True]
    assert bytes(views[3]) == body


# -- PipelinedGets against a scripted server ----------------------------------------------

CLOSE, STALL = b"<close>", b"<stall>"


@dataclass
class Store:
    """A scripted store: ``script(key, nth request on its connection, connection number)``."""

    objects: dict[str, bytes]
    origin: str = ""
    script: Callable[[str, int, int], bytes] | None = None
    connections: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)  # (key, Range)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    stalled: asyncio.Event = field(default_factory=asyncio.Event)  # a connection went silent

    def respond(self, key: str, nth: int, connection: int) -> bytes:
        if self.script is not None:
            scripted = self.script(key, nth, connection)
            if scripted:
                return scripted
        data = self.objects.get(key)
        return not_found() if data is None else answer(data)


class FakeLean:
    """What ``PipelinedGets`` needs of ``LeanRequests``, for a store at ``origin``."""

    def __init__(self, origin: str) -> None:
        self.origin, self.sent_count, self.http_session = origin, 0, None
        self.headers: list[list[tuple[str, str]]] = []  # of each request prepared

    async def prepare(self, bucket: str, key: str, method: str, headers: list[tuple[str, str]]) -> Prepared:
        assert method == "GET"
        self.headers.append(headers)
        return Prepared(self.origin, f"/{bucket}/{key}", [("Host", "store"), *headers])

    def sent(self, operation: str, count: int = 1) -> None:
        self.sent_count += count


async def serve(store: Store, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    store.connections += 1
    store.writers.append(writer)
    connection, nth = store.connections, 0
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ")[1].decode()
            key = path.split("/", 2)[2]
            ranged = [line for line in head.split(b"\r\n") if line.startswith(b"Range: ")]
            store.requests.append((key, ranged[0][7:].decode() if len(ranged) == 1 else ""))
            action = store.respond(key, nth, connection)
            nth += 1
            if action == CLOSE:
                break
            if action == STALL:
                store.stalled.set()
                await asyncio.Event().wait()  # silent until the connection is dropped
            writer.write(action)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    store = Store({f"k{n}": os.urandom(100 + 1000 * n) for n in range(6)})
    server = await asyncio.start_server(lambda r, w: serve(store, r, w), "127.0.0.1", 0)
    store.origin = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield store
        server.close()


class FakeTimer:
    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A ``Clock`` whose time moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], object], /) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback)
        self._timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move time on, running the calls that fall due (those they schedule too)."""
        self.now += seconds
        while due := [t for t in self._timers if not t.cancelled and t.when <= self.now]:
            timer = min(due, key=lambda t: t.when)
            self._timers.remove(timer)
            timer.callback()


def pipeline_to(
    store: Store, read_timeout: float = 10.0, clock: FakeClock | None = None
) -> tuple[PipelinedGets, FakeLean]:
    lean = FakeLean(store.origin)
    pipeline = PipelinedGets(
        cast(LeanRequests, lean), connect_timeout=5, read_timeout=read_timeout, clock=clock
    )
    return pipeline, lean


def arrived(view: memoryview, data: bytes) -> bool:
    return bytes(view) == data


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition`` holds (the test's own timeout bounds it)."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)


async def get_all(pipeline: PipelinedGets, store: Store, keys: list[str]) -> tuple[list[bool], list[bytes]]:
    views = views_for(*(len(store.objects.get(key, b"?")) for key in keys))
    filled = await pipeline.get("bkt", keys, views)
    return filled, [bytes(view) for view in views]


async def test_a_group_goes_on_one_connection_and_the_next_reuses_it(store: Store) -> None:
    pipeline, lean = pipeline_to(store)
    keys = list(store.objects)
    for _ in range(2):
        filled, got = await get_all(pipeline, store, keys)
        assert filled == [True] * len(keys)
        assert got == [store.objects[key] for key in keys]
    assert store.connections == 1
    assert lean.sent_count == 2 * len(keys)
    assert store.requests == 2 * [(key, f"bytes=0-{len(store.objects[key]) - 1}") for key in keys]
    pipeline.close()


async def test_what_a_closed_connection_left_unanswered_is_asked_again(store: Store) -> None:
    store.script = lambda key, nth, connection: CLOSE if nth == 2 and connection == 1 else b""
    pipeline, lean = pipeline_to(store)
    keys = list(store.objects)
    filled, got = await get_all(pipeline, store, keys)
    assert filled == [True] * len(keys)
    assert got == [store.objects[key] for key in keys]
    assert store.connections == 2
    assert lean.sent_count == len(keys) + len(keys) - 2
    pipeline.close()


async def test_an_idle_connection_the_store_closed_is_not_used(store: Store) -> None:
    pipeline, lean = pipeline_to(store)
    keys = list(store.objects)
    assert (await get_all(pipeline, store, keys[:2]))[0] == [True, True]
    for writer in store.writers:
        writer.close()  # the store's idle timeout
    await until(lambda: pipeline.idle_connections() == 0)
    filled, got = await get_all(pipeline, store, keys)
    assert filled == [True] * len(keys)
    assert got == list(store.objects.values())
    assert store.connections == 2
    assert lean.sent_count == 2 + len(keys)  # nothing was sent on the closed one
    pipeline.close()


async def test_a_reused_connection_that_answers_nothing_is_replaced(store: Store) -> None:
    store.script = lambda key, nth, connection: CLOSE if nth == 2 and connection == 1 else b""
    pipeline, _ = pipeline_to(store)
    keys = list(store.objects)
    assert (await get_all(pipeline, store, keys[:2]))[0] == [True, True]
    filled, got = await get_all(pipeline, store, keys)  # the kept connection closes on its next request
    assert filled == [True] * len(keys)
    assert got == list(store.objects.values())
    assert store.connections == 2
    pipeline.close()


async def test_error_answers_and_other_sizes_are_left_to_the_caller(store: Store) -> None:
    sizes = {"k1": 5}  # the store holds 1100 bytes; the caller expects 5
    keys = ["k0", "k1", "missing", "k2"]
    pipeline, _ = pipeline_to(store)
    views = views_for(*(sizes.get(key) or len(store.objects.get(key, b"?")) for key in keys))
    store.script = lambda key, nth, connection: (
        answer(store.objects["k1"][:5], size=1100) if key == "k1" else b""
    )
    assert await pipeline.get("bkt", keys, views) == [True, False, False, True]
    assert bytes(views[3]) == store.objects["k2"]
    assert store.connections == 1  # error answers with short bodies keep the connection
    pipeline.close()


async def test_an_answer_that_cannot_be_framed_is_left_and_the_rest_asked_again(store: Store) -> None:
    chunked = b"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n"
    store.script = lambda key, nth, connection: chunked if key == "k1" else b""
    pipeline, _ = pipeline_to(store)
    filled, _ = await get_all(pipeline, store, ["k0", "k1", "k2", "k3"])
    assert filled == [True, False, True, True]
    assert store.connections == 2
    pipeline.close()


async def stall_then_time_out(
    store: Store, pipeline: PipelinedGets, clock: FakeClock, keys: list[str], answered: int = 0
) -> tuple[list[bool], list[bytes]]:
    """``get_all`` of ``keys`` from a store that goes silent after ``answered`` answers.

    Time moves past the stall timeout once the answers before the silence have arrived.
    """
    store.stalled.clear()
    views = views_for(*(len(store.objects[key]) for key in keys))
    task = asyncio.create_task(pipeline.get("bkt", keys, views))
    async with asyncio.timeout(5):
        await store.stalled.wait()
    await until(lambda: all(bytes(views[n]) == store.objects[keys[n]] for n in range(answered)))
    clock.advance(0.1)
    assert not task.done()  # not yet: the timeout is 0.2 s
    clock.advance(0.1)
    return await asyncio.wait_for(task, 5), [bytes(view) for view in views]


async def test_a_stalled_store_hands_everything_back_without_retrying(store: Store) -> None:
    store.script = lambda key, nth, connection: STALL if nth == 0 else b""
    clock = FakeClock()
    pipeline, _ = pipeline_to(store, read_timeout=0.2, clock=clock)
    filled, _ = await stall_then_time_out(store, pipeline, clock, ["k0", "k1", "k2"])
    assert filled == [False, False, False]
    assert store.connections == 1
    pipeline.close()


async def test_a_store_that_takes_only_the_first_request_is_left_alone_for_a_while(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3pipeline, "STALL_PAUSE", 0.5)
    store.script = lambda key, nth, connection: STALL if nth > 0 else b""  # a proxy that cannot pipeline
    clock = FakeClock()
    pipeline, lean = pipeline_to(store, read_timeout=0.2, clock=clock)
    filled, got = await stall_then_time_out(store, pipeline, clock, ["k0", "k1", "k2"], answered=1)
    assert filled == [True, False, False]
    assert got[0] == store.objects["k0"]
    assert store.connections == 1  # no second connection for a store that stalls
    sent = lean.sent_count
    assert (await get_all(pipeline, store, ["k0", "k1"]))[0] == [False, False]
    assert (lean.sent_count, store.connections) == (sent, 1)  # not even tried
    clock.advance(0.49)
    assert (await get_all(pipeline, store, ["k0", "k1"]))[0] == [False, False]  # 0.49 s on: still paused
    clock.advance(0.02)
    store.script = None
    assert (await get_all(pipeline, store, ["k0", "k1"]))[0] == [True, True]  # the pause is over
    pipeline.close()


async def test_a_slow_store_that_keeps_answering_is_waited_for(store: Store) -> None:
    keys = ["k0", "k1", "k2", "k3"]
    asked = asyncio.Event()
    go = [asyncio.Event() for _ in keys]

    async def slowly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in keys:
            await reader.readuntil(b"\r\n\r\n")
        asked.set()
        for key, cue in zip(keys, go, strict=True):
            await cue.wait()
            writer.write(answer(store.objects[key]))
        await reader.read()
        writer.close()

    server = await asyncio.start_server(slowly, "127.0.0.1", 0)
    async with server:
        slow = Store(store.objects, origin=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        clock = FakeClock()
        pipeline, _ = pipeline_to(slow, read_timeout=0.25, clock=clock)
        views = views_for(*(len(store.objects[key]) for key in keys))
        task = asyncio.create_task(pipeline.get("bkt", keys, views))
        async with asyncio.timeout(5):
            await asyncio.wait([task, asyncio.create_task(asked.wait())], return_when=asyncio.FIRST_COMPLETED)
        for n, (key, cue) in enumerate(zip(keys, go, strict=True)):
            clock.advance(0.1)  # each answer well within the timeout, all of them past it
            cue.set()
            if n < len(keys) - 1:
                await until(functools.partial(arrived, views[n], store.objects[key]))
        filled = await asyncio.wait_for(task, 5)
        got = [bytes(view) for view in views]
        assert clock.now > 0.25
        assert filled == [True] * 4
        assert got == [store.objects[key] for key in ("k0", "k1", "k2", "k3")]
        pipeline.close()
        server.close()


async def test_a_store_that_closes_after_every_answer_is_not_pipelined_to_again(store: Store) -> None:
    store.script = lambda key, nth, connection: answer(store.objects[key], extra="Connection: close\r\n")
    pipeline, lean = pipeline_to(store)
    filled, got = await get_all(pipeline, store, ["k0", "k1", "k2"])
    assert filled == [True, False, False]
    assert got[0] == store.objects["k0"]
    sent, connections = lean.sent_count, store.connections
    assert (await get_all(pipeline, store, ["k0", "k1"]))[0] == [False, False]
    assert (lean.sent_count, store.connections) == (sent, connections) == (3, 1)
    pipeline.close()


async def test_nothing_listens_nothing_filled() -> None:
    idle = Store({"k0": b"a", "k1": b"b"}, origin=f"http://127.0.0.1:{free_port()}")
    pipeline, lean = pipeline_to(idle)
    assert (await get_all(pipeline, idle, ["k0", "k1"]))[0] == [False, False]
    assert lean.sent_count == 0


async def test_cancelled_midway_the_connection_is_not_kept(store: Store) -> None:
    store.script = lambda key, nth, connection: STALL if nth == 1 else b""
    pipeline, _ = pipeline_to(store)
    task = asyncio.create_task(get_all(pipeline, store, ["k0", "k1", "k2"]))
    async with asyncio.timeout(5):
        await store.stalled.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.script = None
    assert (await get_all(pipeline, store, ["k0", "k1"]))[0] == [True, True]
    assert store.connections == 2  # the half-answered connection was dropped, not reused
    pipeline.close()


def serve_ranges(store: Store, status: str = "206 Partial Content") -> Callable[[str, int, int], bytes]:
    """A script answering each GET's ``Range`` of its object, unless its ``If-Match`` is stale."""

    def script(key: str, nth: int, connection: int) -> bytes:
        range_, data = store.requests[-1][1], store.objects[key]
        first, last = (int(n) for n in range_.removeprefix("bytes=").split("-"))
        return ranged(data[first : last + 1], first, len(data), status)

    return script


async def test_a_ranged_get_goes_from_the_socket_into_its_view_on_a_kept_connection(store: Store) -> None:
    store.script = serve_ranges(store)
    pipeline, lean = pipeline_to(store)
    data = store.objects["k5"]
    for first in (0, 1000, len(data) - 7):
        view = memoryview(bytearray(min(1000, len(data) - first)))
        assert await pipeline.get_range("bkt", "k5", '"etag"', first, view)
        assert bytes(view) == data[first : first + len(view)]
    assert store.connections == 1
    assert [r for _, r in store.requests] == [
        "bytes=0-999",
        "bytes=1000-1999",
        f"bytes={len(data) - 7}-{len(data) - 1}",
    ]
    assert lean.sent_count == 3
    assert all(("If-Match", '"etag"') in headers for headers in lean.headers)  # pinned to the version
    pipeline.close()


async def test_a_ranged_get_answered_otherwise_is_left_to_the_caller(store: Store) -> None:
    store.script = lambda key, nth, connection: (
        answer(b"<Error>PreconditionFailed</Error>", status="412 Precondition Failed") if nth == 0 else CLOSE
    )
    pipeline, _ = pipeline_to(store)
    view = memoryview(bytearray(100))
    assert not await pipeline.get_range("bkt", "k1", '"old"', 0, view)  # 412: the object changed
    assert not await pipeline.get_range("bkt", "k1", '"old"', 0, view)  # closed before answering
    assert store.connections == 2  # the kept connection answered nothing: one new one, then given up
    pipeline.close()


# -- against the real stores ---------------------------------------------------------------


@pytest.fixture
async def backend(s3_server: S3Server) -> AsyncIterator[S3Backend]:
    backend = S3Backend(s3_server.new_tier())
    yield backend
    await backend.close()


async def test_read_whole_pipelines_where_the_store_keeps_connections(
    backend: S3Backend, s3_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    files = {f"p/f{n}.bin": os.urandom(3000 + n) for n in range(20)}
    for relpath, data in files.items():
        await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))
    seen: Counter[str] = Counter()
    await backend.observe(lambda operation: seen.update([operation]))
    client = await backend.client()
    botocore_calls: Counter[str] = Counter()
    client.meta.events.register("before-call.s3", lambda model, **_: botocore_calls.update([model.name]))
    for _ in range(2):
        views = [memoryview(bytearray(len(data))) for data in files.values()]
        assert await backend.read_whole(list(files), views) == [None] * len(files)
        assert [bytes(view) for view in views] == list(files.values())
    assert not botocore_calls  # lean or pipelined, never botocore's own
    pipelined = s3_server.kind == "rclone"
    # moto closes after every answer: of its first pipelined group one is answered, the rest go lean.
    assert seen["GetObject"] == (2 * len(files) if pipelined else 2 * len(files) + len(files) - 1)


async def test_a_big_objects_ranges_are_read_off_botocores_path(
    backend: S3Backend, s3_server: S3Server
) -> None:
    """An open reader's ranged GETs go straight into the buffer (``get_range``), not through botocore."""
    data = os.urandom(3 * 1024 * 1024 + 5)
    await backend.write(WriteRequest("big.bin", BytesReader(data), crc(data)))
    client = await backend.client()
    botocore_calls: Counter[str] = Counter()
    client.meta.events.register("before-call.s3", lambda model, **_: botocore_calls.update([model.name]))
    reader = await backend.open_reader("big.bin")
    got = bytearray(len(data))
    for offset in range(0, len(data), 1024 * 1024):
        assert await reader.read_into(offset, memoryview(got)[offset : offset + 1024 * 1024]) > 0
    await reader.close()
    assert got == data
    assert not botocore_calls  # the opening GET lean, the ranges direct


async def test_a_plain_http_endpoint_builds_no_tls_context(backend: S3Backend) -> None:
    """No TLS context, nor the CA bundle's certificates in it (~3.7 MB resident), for plain http."""
    await backend.write(WriteRequest("x.bin", BytesReader(b"x"), crc(b"x")))
    assert backend.fast_path.lean is not None
    session = await backend.fast_path.lean.http_session._get_session(None)
    assert s3pipeline.tls_context_of(session.connector) is False


@pytest.fixture(scope="module")
def tls_rclone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """``rclone serve s3`` over https, with a certificate for 127.0.0.1 from a test CA."""
    workdir = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    files = TlsFiles(workdir / "cert.pem", workdir / "key.pem", workdir / "ca.pem")
    issued.cert_chain_pems[0].write_to_path(str(files.cert))
    issued.private_key_pem.write_to_path(str(files.key))
    ca.cert_pem.write_to_path(str(files.ca))
    with start_rclone(workdir, tls=files) as server:
        yield server


@pytest.mark.xdist_group("tls_rclone")  # both cases on one worker: one TLS server (module fixture)
@pytest.mark.parametrize("verify", [True, False])
async def test_read_whole_pipelines_over_tls_as_the_client_trusts(
    tls_rclone: S3Server, verify: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if verify:
        monkeypatch.setenv("AWS_CA_BUNDLE", str(tls_rclone.ca_bundle))  # botocore's CA, and so ours
    backend = S3Backend(tls_rclone.new_tier(verify_tls=verify))
    try:
        files = {f"t/f{n}.bin": os.urandom(2000 + n) for n in range(8)}
        for relpath, data in files.items():
            await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))
        views = [memoryview(bytearray(len(data))) for data in files.values()]
        assert await backend.read_whole(list(files), views) == [None] * len(files)
        assert [bytes(view) for view in views] == list(files.values())
        assert backend.pipeline is not None
        assert backend.pipeline.idle_connections() == 1  # the group went over a kept TLS connection
    finally:
        await backend.close()
