"""The Blob service's other calls, on the data path's session: properties, block lists, deletes, listings.

Get Blob Properties (``HEAD``: size, ETag, last change, the metadata), Get Block List, Put
Block List, Delete Blob and List Blobs, each one signed request (``azure.rest``), the XML
answers parsed with the standard library. They were the SDK's; sent here, the daemon does
not load azure-storage-blob at all (18 MB of resident memory) and each call skips its
pipeline. An XML answer is read up to ``XML_LIMIT`` bytes, and one declaring a DTD or
entities is refused (the service sends neither), so a hostile endpoint cannot make the
parser expand anything.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote, unquote
from xml.etree import ElementTree

import aiohttp

from tierd.daemon.backends.azure.rest import AzureRest
from tierd.errors import NotFound, TransientBackendError

__all__ = [
    "XML_LIMIT",
    "Block",
    "Listed",
    "Properties",
    "blob_properties",
    "block_lists",
    "commit_blocks",
    "delete_blob",
    "exists",
    "list_blobs",
]

#: The most of an XML answer read (a listing page of 5,000 blobs is a few MB).
XML_LIMIT = 32 * 1024 * 1024
LIST_PAGE = 5000
META = "x-ms-meta-"


@dataclass(frozen=True)
class Properties:
    """What Get Blob Properties says of a blob."""

    size: int
    etag: str | None
    last_modified: datetime | None
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Block:
    """One block of a block list: its ID (decoded) and size."""

    id: str
    size: int


@dataclass(frozen=True)
class Listed:
    """One blob of a listing."""

    name: str
    size: int
    last_modified: datetime | None


def _when(text: str | None) -> datetime | None:
    return parsedate_to_datetime(text) if text else None


async def blob_properties(rest: AzureRest, name: str, location: str, action: str = "stat") -> Properties:
    """Get Blob Properties. Raises NotFound when missing."""
    async with rest.send("HEAD", name, action, location) as response:
        headers = response.headers
    metadata = {key[len(META) :]: value for key, value in headers.items() if key.lower().startswith(META)}
    return Properties(
        int(headers.get("Content-Length", "0")),
        headers.get("ETag"),
        _when(headers.get("Last-Modified")),
        metadata,
    )


async def delete_blob(rest: AzureRest, name: str, location: str, action: str = "delete") -> None:
    """Delete Blob (with its snapshots). Raises NotFound when missing."""
    headers = {"x-ms-delete-snapshots": "include"}
    async with rest.send("DELETE", name, action, location, headers=headers):
        pass


async def block_lists(
    rest: AzureRest, name: str, location: str, which: str
) -> tuple[list[Block], list[Block]]:
    """Get Block List (``which``: committed, uncommitted or all): (committed, uncommitted).

    Raises NotFound when the blob has neither.
    """
    query = f"comp=blocklist&blocklisttype={which}"
    async with rest.send("GET", name, "list blocks of", location, query=query) as response:
        root = await _xml(response, location)
    found: tuple[list[Block], list[Block]] = ([], [])
    for index, section in enumerate(("CommittedBlocks", "UncommittedBlocks")):
        for block in root.iterfind(f"{section}/Block"):
            encoded = block.findtext("Name", "")
            found[index].append(Block(_decoded(encoded), int(block.findtext("Size", "0"))))
    return found


def _decoded(block_id: str) -> str:
    try:
        return base64.b64decode(block_id, validate=True).decode("utf-8")
    except ValueError:
        return block_id  # not one of tierd's: never matched as one


async def commit_blocks(
    rest: AzureRest,
    name: str,
    location: str,
    ids: Sequence[str],
    metadata: Mapping[str, str],
    extra: Mapping[str, str],
) -> None:
    """Put Block List: the blob becomes ``ids``' blocks in order, with ``metadata`` and ``extra`` headers."""
    latest = "".join(f"<Latest>{base64.b64encode(i.encode('utf-8')).decode('ascii')}</Latest>" for i in ids)
    body = f'<?xml version="1.0" encoding="utf-8"?><BlockList>{latest}</BlockList>'.encode()
    headers = {
        "Content-Type": "application/xml; charset=utf-8",
        **{f"{META}{key}": value for key, value in metadata.items()},
        **extra,
    }
    async with rest.send("PUT", name, "commit", location, query="comp=blocklist", headers=headers, body=body):
        pass


async def list_blobs(
    rest: AzureRest, prefix: str, where: str, *, uncommitted: bool = False
) -> AsyncIterator[Listed]:
    """List Blobs under ``prefix``, page after page; ``uncommitted`` adds blobs of staged blocks only.

    Raises PermanentBackendError for a missing container or access denied.
    """
    marker = ""
    while True:
        query = f"comp=list&maxresults={LIST_PAGE}&prefix={quote(prefix, safe='')}&restype=container"
        if uncommitted:
            query += "&include=uncommittedblobs"
        if marker:
            query += f"&marker={quote(marker, safe='')}"
        async with rest.send("GET", "", "list", where, query=query) as response:
            root = await _xml(response, where)
        for blob in root.iterfind("Blobs/Blob"):
            found = blob.find("Name")
            text = (found.text or "") if found is not None else ""
            named = unquote(text) if found is not None and found.get("Encoded") == "true" else text
            size = int(blob.findtext("Properties/Content-Length", "0") or 0)
            yield Listed(named, size, _when(blob.findtext("Properties/Last-Modified")))
        marker = root.findtext("NextMarker", "") or ""
        if not marker:
            return


async def _xml(response: aiohttp.ClientResponse, where: str) -> ElementTree.Element:
    """The answer's XML body, read up to ``XML_LIMIT`` bytes.

    Raises TransientBackendError for a longer or malformed answer (a cut one is retried).
    """
    body = await response.content.read(XML_LIMIT + 1)
    while len(body) <= XML_LIMIT and not response.content.at_eof():
        more = await response.content.read(XML_LIMIT + 1 - len(body))
        if not more:
            break
        body += more
    if len(body) > XML_LIMIT:
        raise TransientBackendError(f"{where}: the service's answer runs past {XML_LIMIT:,} bytes")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:  # the service sends neither: no entity is expanded
        raise TransientBackendError(f"{where}: the service's answer declares a DTD or entities")
    try:
        return ElementTree.fromstring(body)  # noqa: S314 (bounded, no DTD, no entities: checked above)
    except ElementTree.ParseError as exc:
        raise TransientBackendError(f"{where}: the service's answer is not XML: {exc}") from exc


async def exists(rest: AzureRest, name: str, location: str) -> bool:
    """Whether the blob has a committed version."""
    try:
        await blob_properties(rest, name, location)
    except NotFound:
        return False
    return True
