"""The peer clients read no CA file or bundle until an ``https://`` peer is asked, and check those."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme

from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.client import PeerClient, PeerFile
from tierd.daemon.backends.peer.fetch import PeerFetch

FILE = PeerFile("n1", 7, "shard.bin", "AAAAAAAAAAA=")


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Any request: 200, ``Content-Length: 5`` (a HEAD gets the head only)."""
    head = await reader.readuntil(b"\r\n\r\n")
    body = b"" if head.startswith(b"HEAD") else b"hello"
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n" + body)
    await writer.drain()
    writer.close()


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[tuple[str, str, Path]]:
    """(a plain HTTP URL, an HTTPS URL whose certificate a fresh CA signed, that CA's file)."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    plain = await asyncio.start_server(_answer, "127.0.0.1", 0)
    tls = await asyncio.start_server(_answer, "127.0.0.1", 0, ssl=context)
    urls = [
        f"{scheme}://127.0.0.1:{s.sockets[0].getsockname()[1]}"
        for scheme, s in (("http", plain), ("https", tls))
    ]
    yield urls[0], urls[1], tmp_path / "ca.pem"
    for server in (plain, tls):
        server.close()
        await server.wait_closed()


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The CA files and bundles loaded into TLS contexts from now on."""
    loads: list[str] = []
    original: Callable[..., Any] = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> Any:
        loads.append(str(kwargs.get("cafile") or (args[0] if args else "")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    return loads


async def test_plain_http_peers_load_no_certificates_and_https_peers_are_checked(
    servers: tuple[str, str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both clients of a peer daemon loaded the system's bundle at start: 3.7 MB it never used."""
    plain, tls, ca_file = servers
    loads = _count_loads(monkeypatch)
    budget = ByteBudget(1024 * 1024)
    checked = PeerClient("token", budget, verify=str(ca_file))
    system = PeerClient("token", budget, verify=True)
    fetch = PeerFetch("token", budget)
    try:
        assert await checked.held_size(PeerNode("plain", plain), FILE) == 5
        assert await fetch.size(PeerNode("plain", plain), FILE.path()) == 5
        assert loads == [], "a TLS context was made for plain HTTP"

        assert await checked.held_size(PeerNode("tls", tls), FILE) == 5
        assert loads == [str(ca_file)]
        assert await system.held_size(PeerNode("tls", tls), FILE) is None, "a certificate went unchecked"
        assert await checked.held_size(PeerNode("tls", tls), FILE) == 5  # its context is kept
        assert len(loads) == 2  # and the system's bundle, for ``system``
    finally:
        for client in (checked, system, fetch):
            await client.close()
