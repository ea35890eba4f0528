"""A training job's client waits and asks again when the daemon is busy (503 with Retry-After)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tierd.client import BUSY_RETRIES, AsyncClient, Client
from tierd.errors import ApiError


class Busy(ThreadingHTTPServer):
    """Answers ``busy`` requests 503 (Retry-After: 0), then 200 with a checkpoint."""

    def __init__(self, busy: int) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.busy = busy
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Busy

    def do_GET(self) -> None:
        self.server.requests += 1
        busy = self.server.requests <= self.server.busy
        body = json.dumps({"title": "busy", "status": 503} if busy else {"id": 7, "step": 1}).encode()
        self.send_response(503 if busy else 200)
        self.send_header("Content-Type", "application/problem+json" if busy else "application/json")
        self.send_header("Content-Length", str(len(body)))
        if busy:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def serve() -> Iterator[type[Busy]]:
    servers: list[Busy] = []

    def start(busy: int) -> Busy:
        server = Busy(busy)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_busy_answer_is_asked_again(serve) -> None:
    server = serve(busy=3)
    with Client(server.url) as client:
        assert client.latest("demo") == {"id": 7, "step": 1}
    assert server.requests == 4


async def test_the_async_client_asks_again_too(serve) -> None:
    server = serve(busy=2)
    async with AsyncClient(server.url) as client:
        assert await client.latest("demo") == {"id": 7, "step": 1}
    assert server.requests == 3


def test_a_daemon_busy_for_good_is_an_api_error(serve) -> None:
    server = serve(busy=100)
    with Client(server.url) as client, pytest.raises(ApiError) as raised:
        client.latest("demo")
    assert raised.value.status == 503
    assert server.requests == BUSY_RETRIES + 1
