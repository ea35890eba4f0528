"""The Azure data path's bearer-token credential (the identity chain's), against a real local HTTP server.

Azurite takes OAuth only over HTTPS, so the signer's bearer path is driven here against a
small aiohttp server that plays the Blob service for one blob: it accepts a request only
with ``Authorization: Bearer <a token it issued and has not expired>`` (401
``InvalidAuthenticationInfo`` otherwise, as Azure answers), serves ranged and whole Get
Blob, and takes Put Blob and Put Block. The credential is the shape the identity chain
has (``get_token(scope)`` -> ``AccessToken``), so what is tested is the signer's use of it:
the storage scope asked for, the token reused, renewed five minutes before it expires.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from azure.core.credentials import AccessToken

from tierd.daemon.backends.azure.blocks import azure_crc64
from tierd.daemon.backends.azure.puts import put_blob, put_block
from tierd.daemon.backends.azure.reads import OPEN_RANGE, Blob, open_blob, read_whole_blob
from tierd.daemon.backends.azure.rest import STORAGE_SCOPE, TOKEN_MARGIN, AzureRest, Signer
from tierd.daemon.backends.hashing import crc64
from tierd.errors import PermanentBackendError

ACCOUNT, CONTAINER, NAME = "acct", "box", "ckpt/shard.bin"
DATA = os.urandom(OPEN_RANGE + 100_000)


@dataclass
class Identity:
    """A credential as the identity chain's: each ``get_token`` issues a new token, good for ``lifetime``."""

    lifetime: float = 3600.0
    scopes: list[tuple[str, ...]] = field(default_factory=list)
    issued: dict[str, float] = field(default_factory=dict)  # token -> expires_on

    async def get_token(self, *scopes: str) -> AccessToken:
        self.scopes.append(scopes)
        token = f"token-{len(self.scopes)}"
        self.issued[token] = time.time() + self.lifetime
        return AccessToken(token, int(self.issued[token]))


@dataclass
class BlobService:
    """What the server saw: each request's method, query and Authorization header."""

    identity: Identity
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    stored: dict[str, bytes] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        self.seen.append((request.method, request.query_string, auth))
        token = auth.removeprefix("Bearer ")
        if not auth.startswith("Bearer ") or self.identity.issued.get(token, 0) < time.time():
            return web.Response(status=401, headers={"x-ms-error-code": "InvalidAuthenticationInfo"})
        if request.method == "PUT":
            self.stored[request.query_string or "blob"] = await request.read()
            return web.Response(status=201)
        wanted = request.headers.get("x-ms-range")
        if wanted is None:
            return web.Response(body=DATA, headers={"ETag": '"e1"'})
        start, end = (int(x) for x in wanted.removeprefix("bytes=").split("-"))
        end = min(end, len(DATA) - 1)
        headers = {"Content-Range": f"bytes {start}-{end}/{len(DATA)}", "ETag": '"e1"'}
        return web.Response(status=206, body=DATA[start : end + 1], headers=headers)


@pytest.fixture
async def service() -> AsyncIterator[tuple[BlobService, str]]:
    blobs = BlobService(Identity())
    app = web.Application()
    app.router.add_route("*", f"/{ACCOUNT}/{CONTAINER}/{{name:.+}}", blobs.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield blobs, f"http://127.0.0.1:{port}/{ACCOUNT}"
    finally:
        await runner.cleanup()


async def test_reads_and_writes_carry_one_bearer_token_for_the_storage_scope(
    service: tuple[BlobService, str],
) -> None:
    blobs, url = service
    rest = AzureRest(url, CONTAINER, Signer(ACCOUNT, blobs.identity), connections=4)
    try:
        blob = Blob(rest, NAME, f"azure://{ACCOUNT}/{CONTAINER}/{NAME}")
        reader = await open_blob(blob)
        buf = bytearray(len(DATA))
        assert await reader.read_into(0, memoryview(buf)) == len(DATA)  # the head, then one ranged GET
        whole = bytearray(len(DATA))
        await read_whole_blob(blob, memoryview(whole))
        view = memoryview(b"block bytes")
        crc = azure_crc64(await crc64(view))
        await put_block(rest, NAME, blob.location, "id-0", view, crc, None)
        await put_blob(rest, NAME, blob.location, view, crc, {"k": "v"}, {})
    finally:
        await rest.close()
    assert bytes(buf) == DATA
    assert bytes(whole) == DATA
    assert sorted(blobs.stored.values()) == [b"block bytes", b"block bytes"]
    assert [auth for _, _, auth in blobs.seen] == ["Bearer token-1"] * 5
    assert blobs.identity.scopes == [(STORAGE_SCOPE,)]


async def test_a_token_is_renewed_before_it_expires(service: tuple[BlobService, str]) -> None:
    blobs, url = service
    blobs.identity.lifetime = TOKEN_MARGIN - 60  # valid, but within the margin once issued
    rest = AzureRest(url, CONTAINER, Signer(ACCOUNT, blobs.identity), connections=4)
    try:
        blob = Blob(rest, NAME, f"azure://{ACCOUNT}/{CONTAINER}/{NAME}")
        await open_blob(blob)
        await open_blob(blob)
    finally:
        await rest.close()
    assert [auth for _, _, auth in blobs.seen] == ["Bearer token-1", "Bearer token-2"]


async def test_a_refused_token_is_a_permanent_error_naming_the_blob_and_the_code(
    service: tuple[BlobService, str],
) -> None:
    blobs, url = service
    blobs.identity.lifetime = -1.0  # the server takes none of its tokens
    rest = AzureRest(url, CONTAINER, Signer(ACCOUNT, blobs.identity), connections=4)
    try:
        blob = Blob(rest, NAME, f"azure://{ACCOUNT}/{CONTAINER}/{NAME}")
        with pytest.raises(PermanentBackendError, match=rf"{NAME}: 401 InvalidAuthenticationInfo"):
            await open_blob(blob)
    finally:
        await rest.close()
