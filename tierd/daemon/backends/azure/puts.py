"""Put Blob and Put Block on the data path's connections (``AzureRest.put``): the buffer is the body.

Each carries its bytes' CRC64 (``x-ms-content-crc64``) so the service refuses a body it did
not receive intact (``Crc64Mismatch`` -> IntegrityError). A Put Blob also carries the blob's
metadata (``x-ms-meta-*``), access tier and encryption scope; a Put Block its encryption
scope. The body is the budget's buffer the bytes were read and hashed in, sent on
``httpwire`` (no aiohttp request per blob).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from urllib.parse import quote

from tierd.daemon.backends.azure.rest import AzureRest

__all__ = ["put_blob", "put_block", "write_headers"]


def write_headers(access_tier: str | None, encryption_scope: str | None) -> dict[str, str]:
    """The headers every write of a tier carries: its access tier and encryption scope, if set."""
    headers: dict[str, str] = {}
    if access_tier is not None:
        headers["x-ms-access-tier"] = access_tier
    if encryption_scope is not None:
        headers["x-ms-encryption-scope"] = encryption_scope
    return headers


async def put_blob(
    rest: AzureRest,
    name: str,
    location: str,
    view: memoryview,
    crc: str,
    metadata: Mapping[str, str],
    extra: Mapping[str, str],
) -> None:
    """One Put Blob of ``view`` (a block blob, replacing any of that name) with CRC64 ``crc``."""
    headers = {
        "x-ms-blob-type": "BlockBlob",
        "x-ms-content-crc64": crc,
        "Content-Type": "application/octet-stream",
        **{f"x-ms-meta-{key}": value for key, value in metadata.items()},
        **extra,
    }
    await rest.put(name, "write", location, view, headers=headers)


async def put_block(
    rest: AzureRest, name: str, location: str, block_id: str, view: memoryview, crc: str, scope: str | None
) -> None:
    """One Put Block (staged, uncommitted) of ``view`` under ``block_id`` with CRC64 ``crc``."""
    encoded = quote(base64.b64encode(block_id.encode("utf-8")).decode("ascii"), safe="")
    headers = {"x-ms-content-crc64": crc, "Content-Type": "application/octet-stream"}
    headers |= write_headers(None, scope)
    query = f"comp=block&blockid={encoded}"
    await rest.put(name, "stage block of", location, view, query=query, headers=headers)
