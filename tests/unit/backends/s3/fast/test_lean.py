"""The lean path for small objects (``s3.fast.lean``), against moto and rclone serve s3.

Once botocore has sent one request to a bucket, a small object's PutObject, HeadObject and
opening GET skip botocore's client. They must behave exactly as botocore's would: the same
bytes under the same key, the same errors. Anything but a plain answer is sent again
through botocore. Stub servers on 127.0.0.1 play the store that throttles, refuses, or
ignores a Range.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import ReadOnlyCredentials

from tests.conformance.harness import crc, read_back
from tests.fixtures.net import free_port
from tests.fixtures.s3servers import S3Server
from tierd.daemon.backends import BytesReader, S3Backend, WriteRequest
from tierd.daemon.backends.s3.backend import OPEN_RANGE
from tierd.daemon.backends.s3.fast.lean import LeanRequests, Route, object_path, sign
from tierd.errors import NotFound, PermanentBackendError


class Sent:
    """Every API call (``observe``) and those botocore's client made (``before-call``)."""

    def __init__(self) -> None:
        self.all: Counter[str] = Counter()
        self.botocore: Counter[str] = Counter()

    def take(self) -> tuple[Counter[str], Counter[str]]:
        """(all calls, botocore's calls) since the last take."""
        taken = self.all, self.botocore
        self.all, self.botocore = Counter(), Counter()
        return taken


async def watch(backend: S3Backend) -> Sent:
    sent = Sent()
    await backend.observe(lambda operation: sent.all.update([operation]))
    client = await backend.client()
    client.meta.events.register("before-call.s3", lambda model, **_: sent.botocore.update([model.name]))
    return sent


@pytest.fixture
async def backend(s3_server: S3Server) -> AsyncIterator[S3Backend]:
    backend = S3Backend(s3_server.new_tier())
    yield backend
    await backend.close()


def lean_of(backend: S3Backend) -> LeanRequests:
    lean = backend.fast_path.lean
    assert lean is not None
    return lean


async def put(backend: S3Backend, relpath: str, data: bytes) -> None:
    await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))


async def test_the_first_request_goes_through_botocore_and_the_rest_do_not(backend: S3Backend) -> None:
    sent = await watch(backend)
    await put(backend, "first.bin", b"first")
    everything, by_botocore = sent.take()
    assert by_botocore["PutObject"] == 1  # nothing known about the bucket yet
    for n in range(3):
        data = os.urandom(1000 + n)
        await put(backend, f"more/{n}.bin", data)
        assert await read_back(backend, f"more/{n}.bin") == data
        assert (await backend.stat(f"more/{n}.bin")).size == len(data)
    everything, by_botocore = sent.take()
    assert by_botocore == Counter()
    assert everything["PutObject"] == 3
    assert everything["GetObject"] == 3
    assert everything["HeadObject"] >= 3


ODD_KEYS = [
    "with space/a+b~c.bin",
    "ünï/cødé.bin",
    "per%cent/q?x=1&y#z.bin",
    ".hidden/..dots../c",
    "=;,@$!*'()",
]


@pytest.mark.parametrize("relpath", ODD_KEYS)
async def test_odd_keys_land_under_their_own_name(
    backend: S3Backend, s3_server: S3Server, relpath: str
) -> None:
    await put(backend, "learn.bin", b"x")
    sent = await watch(backend)
    data = os.urandom(700)
    await put(backend, relpath, data)
    assert await read_back(backend, relpath) == data
    assert sent.take()[1] == Counter()  # all of it the lean way
    listed = s3_server.client().list_objects_v2(Bucket=backend.bucket, Prefix=backend.prefix)
    assert backend.prefix + relpath in {o["Key"] for o in listed["Contents"]}


async def test_missing_objects_fail_as_botocore_fails_them(backend: S3Backend) -> None:
    cold = S3Backend(backend.tier)  # never learned the bucket: botocore all the way
    try:
        await put(backend, "learn.bin", b"x")
        sent = await watch(backend)
        for operation in ("stat", "open_reader"):
            with pytest.raises(NotFound) as lean_error:
                await getattr(backend, operation)("missing.bin")
            with pytest.raises(NotFound) as botocore_error:
                await getattr(cold, operation)("missing.bin")
            assert str(lean_error.value) == str(botocore_error.value)
        assert sent.take()[1] == Counter()
    finally:
        await cold.close()


async def test_an_empty_object_opens(backend: S3Backend) -> None:
    await put(backend, "learn.bin", b"x")
    await put(backend, "empty.bin", b"")
    reader = await backend.open_reader("empty.bin")
    try:
        assert reader.size == 0
    finally:
        await reader.close()


async def test_a_reader_bigger_than_the_opening_range_reads_the_rest(backend: S3Backend) -> None:
    await put(backend, "learn.bin", b"x")
    data = os.urandom(OPEN_RANGE + 4097)
    await put(backend, "bigger.bin", data)
    assert await read_back(backend, "bigger.bin") == data


# --- stores that answer badly: the lean request is pointed at a stub -----------------------------


@dataclass
class Stub:
    """What the stub store answers to every request, and what it was asked."""

    status: int = 503
    body: bytes = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
    seen: Counter[str] = field(default_factory=Counter)


class _StubHandler(BaseHTTPRequestHandler):
    server: _StubServer

    def handle_one_request(self) -> None:
        """Answer any method with the stub's status and body."""
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline or not self.parse_request():
            self.close_connection = True
            return
        stub = self.server.stub
        stub.seen[self.command] += 1
        if length := int(self.headers.get("Content-Length", 0)):
            self.rfile.read(length)
        self.send_response(stub.status)
        self.send_header("Content-Length", str(len(stub.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(stub.body)
        self.wfile.flush()

    def log_message(self, *_: Any) -> None:
        """Quiet."""


class _StubServer(ThreadingHTTPServer):
    stub: Stub


@pytest.fixture
def stub() -> Iterator[tuple[str, Stub]]:
    server = _StubServer(("127.0.0.1", free_port()), _StubHandler)
    server.stub = Stub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def point_at(backend: S3Backend, url: str) -> None:
    """Send the backend's lean requests to ``url`` (as if the bucket lived there)."""
    lean = lean_of(backend)
    route = lean._routes[backend.bucket]
    lean._routes[backend.bucket] = replace(route, origin=url, host=url.split("//", 1)[1])


async def test_a_throttled_lean_request_is_sent_again_by_botocore(
    backend: S3Backend, stub: tuple[str, Stub]
) -> None:
    url, answers = stub
    await put(backend, "learn.bin", b"x")
    point_at(backend, url)
    sent = await watch(backend)
    data = os.urandom(2000)
    await put(backend, "slow.bin", data)  # the stub says SlowDown; the real store takes it
    assert answers.seen["PUT"] == 1
    assert sent.take()[1]["PutObject"] == 1
    assert await read_back(backend, "slow.bin") == data


async def test_an_unreachable_store_is_tried_again_by_botocore(backend: S3Backend) -> None:
    await put(backend, "learn.bin", b"x")
    point_at(backend, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    sent = await watch(backend)
    assert (await backend.stat("learn.bin")).size == 1
    assert sent.take()[1] == Counter({"HeadObject": 1})


async def test_a_refusal_is_final_and_not_sent_again(backend: S3Backend, stub: tuple[str, Stub]) -> None:
    url, answers = stub
    answers.status = 403
    answers.body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
    await put(backend, "learn.bin", b"x")
    point_at(backend, url)
    sent = await watch(backend)
    with pytest.raises(PermanentBackendError, match="AccessDenied Access Denied"):
        await put(backend, "denied.bin", b"no")
    assert sent.take()[1] == Counter()


async def test_a_store_ignoring_the_range_is_read_by_botocore(
    backend: S3Backend, stub: tuple[str, Stub]
) -> None:
    url, answers = stub
    answers.status, answers.body = 200, os.urandom(OPEN_RANGE * 4)  # the whole object, not the range
    data = os.urandom(OPEN_RANGE * 2)
    await put(backend, "big.bin", data)
    point_at(backend, url)
    sent = await watch(backend)
    assert await read_back(backend, "big.bin") == data
    assert answers.seen["GET"] == 1
    assert sent.take()[1]["GetObject"] >= 1


def test_keys_are_encoded_as_botocore_encodes_them() -> None:
    assert object_path("a b/c~d+e") == "a%20b/c~d%2Be"
    assert object_path("ü/%") == "%C3%BC/%25"


@pytest.mark.parametrize(
    ("base", "host"),
    [
        ("http://127.0.0.1:9000/bucket/", "127.0.0.1:9000"),
        ("https://Bucket.S3.eu-west-1.amazonaws.com/", "bucket.s3.eu-west-1.amazonaws.com"),
        ("https://s3.example.com:443/base/bucket/", "s3.example.com"),
        ("http://[::1]:9000/bucket/", "[::1]:9000"),
    ],
)
def test_routes_sign_the_host_botocore_signs(base: str, host: str) -> None:
    assert Route.of(base, "us-east-1", "s3", None).host == host


@pytest.mark.parametrize("token", [None, "a-session-token"])
def test_signatures_are_botocores(token: str | None) -> None:
    credentials = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    url = "http://[::1]:9000/my-bucket/a%20b/c~d%2Be"
    headers = [("x-amz-checksum-crc64nvme", "AAAAAAAAAAA="), ("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg==")]
    request = AWSRequest(method="PUT", url=url, headers=dict(headers), data=b"x")
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(request)
    when = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    route = Route.of("http://[::1]:9000/my-bucket/", "eu-west-1", "s3", None)
    ours = dict(sign("PUT", route, "/my-bucket/a%20b/c~d%2Be", headers, credentials, when))
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours.get("X-Amz-Security-Token") == request.headers.get("X-Amz-Security-Token")
