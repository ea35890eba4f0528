"""An Azure tier's blob GETs and puts (``azure.reads``, ``azure.puts``) against a scripted real server.

They go on ``httpwire``'s kept connections, not aiohttp's session; each answer's error
code, length and framing is checked as the reads promise. Azurite runs the same reads in the
conformance suite and the fault proxy's cases (``tests/faults/test_azure_faults.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from azure.core.credentials import AzureNamedKeyCredential

from tests.fixtures.azurite import ACCOUNT, ACCOUNT_KEY
from tests.unit.backends.test_httpwire import Start, serve
from tierd.daemon.backends.azure.puts import put_blob, put_block
from tierd.daemon.backends.azure.reads import Blob, fill, open_blob, read_whole_blob
from tierd.daemon.backends.azure.rest import AzureRest, Signer
from tierd.errors import IntegrityError, NotFound, ObjectArchived, TransientBackendError

__all__ = ["serve"]


def answer(status: str, body: bytes, *headers: str) -> bytes:
    head = "".join(f"{line}\r\n" for line in (f"Content-Length: {len(body)}", *headers))
    return f"HTTP/1.1 {status}\r\n{head}\r\n".encode() + body


@pytest.fixture
async def rest_of(serve: Start) -> AsyncIterator[Any]:
    """An ``AzureRest`` (Shared Key) on a scripted server; closed at teardown."""
    made: list[AzureRest] = []

    async def make(script: dict[str, tuple[bytes, bool]]) -> tuple[Any, AzureRest]:
        server = await serve({f"/{ACCOUNT}/box/{name}": reply for name, reply in script.items()})
        signer = Signer(ACCOUNT, AzureNamedKeyCredential(ACCOUNT, ACCOUNT_KEY))
        made.append(AzureRest(f"{server.url}/{ACCOUNT}", "box", signer, connections=4))
        return server, made[-1]

    yield make
    for rest in made:
        await rest.close()


async def test_blob_gets_and_puts_are_signed_and_share_one_kept_connection_without_aiohttp(
    rest_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a blob's GET went through aiohttp")

    monkeypatch.setattr(aiohttp.ClientSession, "_request", refused)
    first = answer("206 Partial Content", b"a" * 10, "Content-Range: bytes 0-9/10", 'ETag: "0x1"')
    created = (answer("201 Created", b""), False)
    server, rest = await rest_of(
        {"a": (first, False), "b": (answer("200 OK", b"b" * 7), False), "c": created, "d": created}
    )
    reader = await open_blob(Blob(rest, "a", "az://box/a"))
    whole = bytearray(7)
    await read_whole_blob(Blob(rest, "b", "az://box/b"), memoryview(whole))
    await put_blob(rest, "c", "az://box/c", memoryview(b"put"), "crc1", {"mode": "420"}, {})
    await put_block(rest, "d", "az://box/d", "block-0", memoryview(b"block"), "crc2", None)
    assert (reader.size, bytes(whole)) == (10, b"b" * 7)
    assert server.connections == 1
    assert server.bodies == [b"", b"", b"put", b"block"]
    assert b"\r\nx-ms-content-crc64: crc1\r\n" in server.requests[2]
    assert b"\r\nx-ms-meta-mode: 420\r\n" in server.requests[2]
    assert server.requests[3].startswith(b"PUT /devstoreaccount1/box/d?comp=block&blockid=")
    for head in server.requests:
        assert f"\r\nAuthorization: SharedKey {ACCOUNT}:".encode() in head
        assert b"\r\nx-ms-version: " in head
        assert b"\r\nx-ms-date: " in head
    assert b"\r\nx-ms-range: bytes=0-262143\r\n" in server.requests[0]


@pytest.mark.parametrize(
    ("status", "code", "error", "message"),
    [
        ("404 Not Found", "BlobNotFound", NotFound, "404 BlobNotFound"),
        ("409 Conflict", "BlobArchived", ObjectArchived, "Archive access tier"),
        ("412 Precondition Failed", "ConditionNotMet", TransientBackendError, "changed since it was opened"),
        ("503 Server Busy", "ServerBusy", TransientBackendError, "503 ServerBusy"),
    ],
)
async def test_a_refused_get_raises_the_error_its_code_names(
    rest_of: Any, status: str, code: str, error: type[Exception], message: str
) -> None:
    body = f"<Error><Code>{code}</Code><Message>no.</Message></Error>".encode()
    _, rest = await rest_of({"a": (answer(status, body, f"x-ms-error-code: {code}"), False)})
    with pytest.raises(error, match=f"read az://box/a: .*{message}"):
        await fill(Blob(rest, "a", "az://box/a"), 0, memoryview(bytearray(4)), '"0x1"')


async def test_a_body_longer_than_the_buffer_is_refused(rest_of: Any) -> None:
    _, rest = await rest_of({"a": (answer("206 Partial Content", b"x" * 9), False)})
    with pytest.raises(TransientBackendError, match="runs past 4 bytes"):
        await fill(Blob(rest, "a", "az://box/a"), 0, memoryview(bytearray(4)), None)


async def test_a_chunked_body_that_fills_the_buffer_exactly_is_read(rest_of: Any) -> None:
    chunked = b"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n"
    _, rest = await rest_of({"a": (chunked, False)})
    view = memoryview(bytearray(4))
    await fill(Blob(rest, "a", "az://box/a"), 0, view, None)
    assert bytes(view) == b"abcd"


async def test_a_whole_read_of_another_length_is_an_integrity_error(rest_of: Any) -> None:
    _, rest = await rest_of({"a": (answer("200 OK", b"x" * 5), False)})
    with pytest.raises(IntegrityError, match="az://box/a: holds 5 bytes, expected 4"):
        await read_whole_blob(Blob(rest, "a", "az://box/a"), memoryview(bytearray(4)))


async def test_a_put_refused_for_its_crc64_is_an_integrity_error(rest_of: Any) -> None:
    code = "Crc64Mismatch"
    refused = answer(
        "400 Bad Request", b"<Error><Code>Crc64Mismatch</Code></Error>", f"x-ms-error-code: {code}"
    )
    _, rest = await rest_of({"c": (refused, False)})
    with pytest.raises(IntegrityError, match="write az://box/c: 400 Crc64Mismatch"):
        await put_blob(rest, "c", "az://box/c", memoryview(b"put"), "crc1", {}, {})


def test_the_date_header_is_formatted_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    rest = AzureRest("http://127.0.0.1:9/acct", "box", Signer(ACCOUNT, None), connections=1)
    monkeypatch.setattr("tierd.daemon.backends.azure.rest.time.time", lambda: 1_000_000_000.9)
    assert rest.date() == "Sun, 09 Sep 2001 01:46:40 GMT"
    monkeypatch.setattr("tierd.daemon.backends.azure.rest.formatdate", None)  # not called again
    assert rest.date() == "Sun, 09 Sep 2001 01:46:40 GMT"
