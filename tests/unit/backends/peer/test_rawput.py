"""A file sent to a real receiver (the API with a peer tier) by ``os.sendfile`` and read off the
connection's socket: whole, a byte changed in flight refused and resent, a wrong checksum refused,
a sender cut mid-body leaving nothing, and over TLS the path through the server as before."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from structlog.testing import capture_logs

from tests.fixtures.faultproxy import Fault, FaultProxy, Rule
from tests.fixtures.world import World, crc, posix_tier
from tests.unit.backends.peer.receivers import Receiver
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.backends.peer import rawput
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.client import PeerClient, PeerFile
from tierd.daemon.backends.peer.store import CHECKSUM_HEADER, PeerStore
from tierd.daemon.backends.posix.reader import PosixReader
from tierd.daemon.catalog.db import Database

TOKENS = [{"name": "peers", "token": "p-token", "role": "peer"}]
#: Not a multiple of the receiver's 2 MiB chunk nor of the sender's 8 MiB piece.
DATA = os.urandom(9 * 1024 * 1024 + 17)
HELD = "node-a/3/step_3/__0_0.distcp"
DEADLINE = 20.0


FILE = PeerFile("node-a", 3, "step_3/__0_0.distcp", crc(DATA))


async def _receiver(
    tmp_path: Path, db: Database, tls: ssl.SSLContext | None = None
) -> tuple[Receiver, ApiService]:
    root = tmp_path / "node-b"
    peer = {"name": "peers", "kind": "peer", "path": str(root / "peer")}
    world = World.make(root, db, [posix_tier(root, "nvme"), peer], api={"tokens": TOKENS})
    api = ApiService(create_app(world.service.ctx), "127.0.0.5", 0, tls=tls)
    await api.start()
    scheme = "https" if tls is not None else "http"
    return Receiver(PeerNode("node-b", f"{scheme}://127.0.0.5:{api.port}"), root / "peer"), api


@pytest.fixture
async def receiver(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Receiver]:
    """node-b on plain HTTP."""
    found, api = await _receiver(tmp_path, sqlite_db)
    yield found
    await api.stop(5)


@pytest.fixture
def source(tmp_path: Path) -> Callable[[], PosixReader]:
    """Opens DATA as a file of this node's tier 0 (a PosixReader with its descriptor)."""
    path = tmp_path / "source.distcp"
    path.write_bytes(DATA)

    def open_reader() -> PosixReader:
        return PosixReader(os.open(path, os.O_RDONLY), len(DATA), str(path))

    return open_reader


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts ``os.sendfile`` calls; a body that goes through the server fails the test."""
    calls = {"sendfile": 0}
    real = os.sendfile

    def sendfile(*args: Any) -> int:
        calls["sendfile"] += 1
        return real(*args)

    async def through_the_server(*_: object) -> None:
        raise AssertionError("the body went through the ASGI server")

    monkeypatch.setattr(os, "sendfile", sendfile)
    monkeypatch.setattr(PeerStore, "receive", through_the_server)
    return calls


async def _deliver(client: PeerClient, peer: PeerNode, open_reader: Callable[[], PosixReader]) -> None:
    async def opened() -> PosixReader:
        return open_reader()

    await client.deliver(peer, FILE, opened)


async def test_a_file_goes_by_sendfile_and_is_read_off_the_socket(
    receiver: Receiver, source: Callable[[], PosixReader], spied: dict[str, int]
) -> None:
    client = PeerClient("p-token", ByteBudget(4 * 1024 * 1024))
    try:
        await _deliver(client, receiver.node, source)
        await _deliver(client, receiver.node, source)  # again over it: a new connection each
    finally:
        await client.close()
    assert spied["sendfile"] >= 2
    assert receiver.holds() == [HELD]
    assert (receiver.peer_dir / HELD).read_bytes() == DATA


async def test_a_byte_changed_in_flight_is_refused_and_sent_again(
    receiver: Receiver, source: Callable[[], PosixReader]
) -> None:
    """The proxy flips one byte of the first body (it relays without ``Expect``: the body goes
    through the receiving server, the sender's side is sendfile's)."""
    with FaultProxy(receiver.node.url) as proxy:
        proxy.set_rules([Rule(Fault("corrupt_request"), method="PUT", first=1)])
        client = PeerClient("p-token", ByteBudget(4 * 1024 * 1024))
        try:
            with capture_logs() as logs:
                await _deliver(client, PeerNode("node-b", proxy.endpoint_url), source)
        finally:
            await client.close()
    assert [e["status"] for e in logs if e["event"] == "peer_refused"] == [422]
    assert len(proxy.fired) == 1
    assert receiver.holds() == [HELD]
    assert (receiver.peer_dir / HELD).read_bytes() == DATA


async def test_a_body_off_the_socket_not_hashing_to_its_checksum_is_refused(
    receiver: Receiver, source: Callable[[], PosixReader], spied: dict[str, int]
) -> None:
    headers = {"Authorization": "Bearer p-token", CHECKSUM_HEADER: crc(b"other bytes")}
    reader = source()
    try:
        status, body = await rawput.put_file(
            receiver.node.url + FILE.path(), headers, reader.fileno(), len(DATA)
        )
    finally:
        await reader.close()
    assert status == 422, body
    assert b"nothing kept" in body
    assert receiver.holds() == []


async def test_a_sender_cut_mid_body_leaves_nothing(
    receiver: Receiver, source: Callable[[], PosixReader]
) -> None:
    loop = asyncio.get_running_loop()
    with socket.socket() as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.5", int(receiver.node.url.rsplit(":", 1)[1])))
        head = (
            f"PUT {FILE.path()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer p-token\r\n"
            f"{CHECKSUM_HEADER}: {FILE.checksum}\r\nContent-Length: {len(DATA)}\r\n"
            "Expect: 100-continue\r\n\r\n"
        )
        await loop.sock_sendall(sock, head.encode())
        assert (await loop.sock_recv(sock, 100)).startswith(b"HTTP/1.1 100")
        await loop.sock_sendall(sock, DATA[: len(DATA) // 2])
        sock.shutdown(socket.SHUT_WR)  # the body ends half-way (a sender killed: its FIN)
        answer = b""
        async with asyncio.timeout(DEADLINE):
            while piece := await loop.sock_recv(sock, 65536):
                answer += piece
    assert answer.startswith(b"HTTP/1.1 422"), answer[:200]
    assert b"nothing kept" in answer
    assert receiver.holds() == []
    client = PeerClient("p-token", ByteBudget(4 * 1024 * 1024))
    try:
        await _deliver(client, receiver.node, source)
    finally:
        await client.close()
    assert receiver.holds() == [HELD]


async def test_over_tls_the_body_goes_through_the_server(
    tmp_path: Path, sqlite_db: Database, source: Callable[[], PosixReader], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem.bytes())
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.5").configure_cert(server)

    def no_sendfile(*_: object) -> int:
        raise AssertionError("sendfile over TLS")

    monkeypatch.setattr(os, "sendfile", no_sendfile)
    found, api = await _receiver(tmp_path, sqlite_db, tls=server)
    try:
        client = PeerClient("p-token", ByteBudget(4 * 1024 * 1024), verify=str(tmp_path / "ca.pem"))
        try:
            await _deliver(client, found.node, source)
        finally:
            await client.close()
    finally:
        await api.stop(5)
    assert found.holds() == [HELD]
    assert (found.peer_dir / HELD).read_bytes() == DATA


async def test_a_wrong_token_is_answered_before_the_body_is_sent(
    receiver: Receiver, source: Callable[[], PosixReader], spied: dict[str, int]
) -> None:
    headers = {"Authorization": "Bearer not-a-token", CHECKSUM_HEADER: FILE.checksum}
    reader = source()
    try:
        url = receiver.node.url + FILE.path()
        status, _ = await rawput.put_file(url, headers, reader.fileno(), len(DATA))
    finally:
        await reader.close()
    assert status == 401
    assert spied["sendfile"] == 0  # the refusal came in place of 100 Continue
    assert receiver.holds() == []
