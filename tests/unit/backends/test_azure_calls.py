"""The Azure tier's own calls (``azure.calls``): no SDK loaded, the service's header order, listings
paged on Azurite, and an XML answer that declares entities refused."""

from __future__ import annotations

import json
import random
import string
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from azure.core.credentials import AzureNamedKeyCredential
from azure.storage.blob._shared.authentication import _storage_header_sort

from tests.conformance.harness import crc
from tests.fixtures.azurite import ACCOUNT, ACCOUNT_KEY, AzuriteServer
from tierd.daemon.backends import BytesReader, WriteRequest
from tierd.daemon.backends.azure import AzureBackend, calls
from tierd.daemon.backends.azure.rest import AzureRest, Signer, header_order
from tierd.errors import TransientBackendError


def test_an_azure_tier_loads_no_azure_storage_blob() -> None:
    """The SDK's generated clients are 18 MB of a daemon's resident memory; every call is tierd's own."""
    code = (
        "import json, sys; from tierd.config import AzureTier;"
        "from tierd.daemon.backends import make_backend;"
        "b = make_backend(AzureTier(name='az', kind='azure', account='acct', container='box',"
        " account_key='a2V5', endpoint_url='http://127.0.0.1:9/acct')); b.rest;"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('azure.storage'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


SENT = [
    "x-ms-date",
    "x-ms-version",
    "x-ms-range",
    "x-ms-content-crc64",
    "x-ms-blob-type",
    "x-ms-access-tier",
    "x-ms-encryption-scope",
    "x-ms-delete-snapshots",
    "x-ms-meta-crc64nvme",
    "x-ms-meta-mode",
    "x-ms-meta-uid",
    "x-ms-meta-gid",
]


def test_canonical_headers_are_in_the_order_the_sdk_emulates_for_the_service() -> None:
    rng = random.Random(28)
    alphabet = string.ascii_lowercase + string.digits + "_"
    for _ in range(300):
        names = rng.sample(SENT, rng.randrange(2, len(SENT)))
        names += [f"x-ms-meta-{''.join(rng.choices(alphabet, k=rng.randrange(1, 8)))}" for _ in range(3)]
        headers = [(name, "v") for name in dict.fromkeys(names)]
        assert sorted(headers, key=header_order) == _storage_header_sort(headers)


async def test_a_listing_follows_every_page(
    azurite_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls, "LIST_PAGE", 2)
    azure = AzureBackend(azurite_server.new_tier())
    try:
        for index in range(5):
            data = f"blob {index}".encode()
            await azure.write(WriteRequest(f"d/f{index}.bin", BytesReader(data), crc(data)))
        assert sorted([info.relpath async for info in azure.list("d")]) == [f"d/f{i}.bin" for i in range(5)]
    finally:
        await azure.close()


@pytest.fixture
async def entity_server() -> AsyncIterator[str]:
    """A server whose block list declares an entity (a billion-laughs answer starts so)."""
    body = b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa">]><BlockList>&a;</BlockList>'

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/xml")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/{ACCOUNT}"
    finally:
        await runner.cleanup()


async def test_an_answer_declaring_entities_is_refused(entity_server: str) -> None:
    signer = Signer(ACCOUNT, AzureNamedKeyCredential(ACCOUNT, ACCOUNT_KEY))
    rest = AzureRest(entity_server, "box", signer, connections=2)
    try:
        with pytest.raises(TransientBackendError, match=r"azure://x: .*declares a DTD or entities"):
            await calls.block_lists(rest, "blob", "azure://x", "uncommitted")
    finally:
        await rest.close()
