"""Authentication and the body's size are checked before a byte of the body is read.

Sent as an attacker would, over a raw HTTP/1.1 connection: the headers of a huge body (by
Content-Length, or chunked with no end), then only as much of it as the test chooses. An
answer that comes while the body is unfinished shows the daemon did not wait to read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import posix_config_dict
from tests.fixtures.world import World, posix_tier
from tierd.api.app import create_app
from tierd.api.docs import DOCS_PATHS
from tierd.api.gate import PUBLIC_PATHS
from tierd.api.server import ApiService
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context

LIMIT = 64 * 1024
TOKEN = "o-token"
MiB = 1024 * 1024
PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Served:
    port: int

    async def send(self, head: str, body: bytes = b"") -> Answer:
        """Send ``head`` (the request line and headers) and ``body``, then read the answer.

        The body may be a part of what the headers announce: the answer must come anyway.
        """
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), 20)  # each refusal closes the connection
        finally:
            writer.close()
        return _parse(raw)


def _parse(raw: bytes) -> Answer:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return Answer(int(status_line.split()[1]), headers, json.loads(body) if body else {})


def notify_head(*, token: str | None = TOKEN, length: int | None = None) -> str:
    """A notify's headers announcing ``length`` bytes, or a chunked body when None."""
    lines = ["POST /v1/checkpoints HTTP/1.1", "Host: tierd", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    return "\n".join(lines) + "\n"


def chunks(size: int, *, count: int) -> bytes:
    """``count`` chunks of ``size`` bytes each (inside a JSON string), without the final chunk."""
    data = b"x" * size
    return b"".join(b"%x\r\n%s\r\n" % (len(data), data) for _ in range(count))


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Served]:
    """The API with an operate token and ``api.max_body_bytes`` of 64 KiB."""
    api_config = {
        "listen": "127.0.0.1:0",
        "tokens": [{"name": "bot", "token": TOKEN, "role": "operate"}],
        "max_body_bytes": LIMIT,
    }
    world = World.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme")], api=api_config)
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    try:
        yield Served(api.port)
    finally:
        await api.stop(5)


def assert_problem(answer: Answer, status: int, detail: str) -> None:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == PROBLEM
    assert answer.headers["connection"] == "close"
    assert detail in answer.body["detail"]


async def test_a_request_without_a_known_token_is_refused_before_its_body(served: Served) -> None:
    """98 MiB announced, nothing sent: the 401 comes at once (FastAPI read the whole body first)."""
    for token, detail in [(None, "a bearer token is required"), ("guess", "unknown bearer token")]:
        answer = await served.send(notify_head(token=token, length=98 * MiB))
        assert_problem(answer, 401, detail)
        assert answer.headers["www-authenticate"] == "Bearer"
        unended = await served.send(notify_head(token=token), chunks(1024, count=4))
        assert_problem(unended, 401, detail)


async def test_a_body_longer_than_the_bound_is_refused_before_it_is_read(served: Served) -> None:
    answer = await served.send(notify_head(length=LIMIT + 1))
    assert_problem(answer, 413, f"api.max_body_bytes ({LIMIT} bytes)")


async def test_a_chunked_body_is_refused_once_it_passes_the_bound(served: Served) -> None:
    """The body never ends: the 413 comes once the bytes received pass the bound."""
    answer = await served.send(notify_head(), chunks(16 * 1024, count=LIMIT // (16 * 1024) + 1))
    assert_problem(answer, 413, "api.max_body_bytes")


async def test_a_body_within_the_bound_reaches_the_route(served: Served) -> None:
    """A body of exactly the bound is read and validated (here refused for its contents)."""
    prefix, suffix = b'{"run": "', b'", "step": 1, "path": "p"}'
    body = prefix + b"r" * (LIMIT - len(prefix) - len(suffix)) + suffix
    answer = await served.send(notify_head(length=len(body)), body)
    assert answer.status == 422, answer
    assert "body.run" in answer.body["detail"]


async def test_public_routes_need_no_token(served: Served) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{served.port}") as client:
        for path in ("/livez", "/healthz", "/metrics", "/v1/openapi.json"):
            assert (await client.get(path)).status_code == 200, path
        assert (await client.get("/v1/checkpoints")).status_code == 401


def test_the_public_paths_are_the_routes_that_need_no_token(tmp_path: Path) -> None:
    """The gate's list cannot drift from the routes: a route without a role must be listed."""
    ctx = Context(config=Config(**posix_config_dict(tmp_path)), db=Database("sqlite://"))
    app = create_app(ctx)
    document = app.openapi()
    tokenless = {
        path
        for path, operations in document["paths"].items()
        if all("401" not in operation["responses"] for operation in operations.values())
    }
    described = {app.openapi_url, *DOCS_PATHS}
    assert tokenless | described == PUBLIC_PATHS


async def test_memory_does_not_grow_by_the_body_of_a_caller_without_a_token(
    tmp_path: Path, sqlite_db: Database
) -> None:
    """The issue's reproduction: a 98 MiB POST with no token (default bound, 8 MiB). The daemon
    answers 401 without reading it, so the body never lands in memory (it took 294 MiB)."""
    tokens = [{"name": "bot", "token": TOKEN, "role": "operate"}]
    world = World.make(
        tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme")], api={"listen": "127.0.0.1:0", "tokens": tokens}
    )
    api = ApiService(create_app(world.service.ctx), "127.0.0.1", 0)
    await api.start()
    body = b"x" * (98 * MiB)
    tracemalloc.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", api.port)
        writer.write(notify_head(token=None, length=len(body)).replace("\n", "\r\n").encode() + b"\r\n")
        sent = await _send_until_closed(writer, body)
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(reader.read(), 20)
        writer.close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await api.stop(5)
    assert sent < len(body), "the daemon read the whole body of a caller it does not know"
    assert peak < 16 * MiB, f"{peak} bytes traced at the peak for a {len(body)}-byte body"


async def _send_until_closed(writer: asyncio.StreamWriter, body: bytes) -> int:
    """Send ``body`` in 1 MiB writes until the peer closes; returns how many bytes were written."""
    view = memoryview(body)
    sent = 0
    try:
        while sent < len(body):
            writer.write(view[sent : sent + MiB])
            await asyncio.wait_for(writer.drain(), 20)
            sent += MiB
    except (ConnectionError, TimeoutError):
        pass
    return sent
