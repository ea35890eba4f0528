"""Peer copies: other nodes' parts held in this node's peer directory (the ``peer`` role only).

``PUT`` streams one file to disk: its size is the Content-Length (required, checked against
``MAX_FILE_BYTES`` by the gate and against the peer directory's room here, before a byte is
read), its CRC64NVME taken at first sight is in ``x-tierd-crc64nvme``; a body that does not
hash to it is refused (422) and leaves nothing. ``GET`` (with one ``Range`` at most: a restore
reads a file's chunks in parallel) and ``HEAD`` give a held file back, ``DELETE`` removes a file
or a node's whole part of a checkpoint. At most the peer tier's ``concurrency`` requests move
bytes at once; one more is answered 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Path, Request, Response
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from tierd.api.deps import PeerCaller
from tierd.api.problems import ProblemRoute, problem_responses
from tierd.api.rawbody import CLOSE, RawBody, raw_body
from tierd.api.schemas.peer import PeerFileOut, PeerRemovedOut
from tierd.daemon.backends.base import ObjectInfo
from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.peer import CHECKSUM_HEADER, PeerStore
from tierd.daemon.backends.peer.store import CHECKSUM_SHAPE
from tierd.errors import IntegrityError, NoSpace, NotFound, TierdError, TransientBackendError

__all__ = ["router"]

router = APIRouter(prefix="/v1/peer", tags=["peer"], route_class=ProblemRoute)

Node = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$", description="the sending node")]
CheckpointId = Annotated[int, Path(ge=1, le=2**63 - 1)]
RelPath = Annotated[str, Path(min_length=1, max_length=4096, description="the file, relative to the step")]
_FILE = "/{node}/{checkpoint_id}/files/{relpath:path}"
_NO_PEER = problem_responses(404, description="no such file held, or this node has no peer tier")
_BUSY = problem_responses(503, description="the peer tier moves as many files as it may (Retry-After)")
READ_CHUNK = 1 * MIB
_RANGE = re.compile(r"^bytes=(\d{1,19})-(\d{1,19})$")


@router.put(
    _FILE,
    operation_id="putPeerFile",
    status_code=201,
    responses={
        **_NO_PEER,
        **_BUSY,
        **problem_responses(411, description="no Content-Length: the size is declared before the body"),
        **problem_responses(413, description="the file is larger than any a peer may send"),
        **problem_responses(507, description="the peer directory has no room for the declared size"),
    },
)
async def put_file(
    request: Request,
    response: Response,
    _caller: PeerCaller,
    node: Node,
    checkpoint_id: CheckpointId,
    relpath: RelPath,
    checksum: Annotated[str, Header(alias=CHECKSUM_HEADER, pattern=CHECKSUM_SHAPE.pattern)],
) -> PeerFileOut:
    """Hold one file of another node's part: streamed to a temporary name, hashed, fsynced, renamed.

    422 when the bytes do not hash to ``x-tierd-crc64nvme`` (nothing is left behind). A sender
    that asks ``Expect: 100-continue`` on plain HTTP has its body read off the connection
    (``rawbody``), which is closed after the answer.
    """
    raw = raw_body(request)
    try:
        info = await _put(request, raw, _locate(request, node, checkpoint_id, relpath), checksum)
    except HTTPException as exc:
        if raw is not None:
            exc.headers = {**(exc.headers or {}), **CLOSE}
        raise
    finally:
        if raw is not None:
            raw.close()
    if raw is not None:
        response.headers.update(CLOSE)
    assert info.checksum is not None
    return PeerFileOut(
        node=node, checkpoint_id=checkpoint_id, relpath=relpath, size=info.size, checksum=info.checksum
    )


async def _put(
    request: Request, raw: RawBody | None, place: tuple[PeerStore, str], checksum: str
) -> ObjectInfo:
    """The file received at ``place``: its body off the connection (``raw``) or through the server."""
    store, where = place
    length = request.headers.get("content-length", "")
    if not length.isdigit() or "transfer-encoding" in request.headers:
        raise HTTPException(411, "a peer's file needs a Content-Length (its declared size), not chunks")
    _slot_free(store)
    async with store.slots:
        try:
            if raw is not None:
                return await store.receive_from(where, int(length), checksum, raw.take)
            return await store.receive(where, int(length), checksum, request.stream())
        except ClientDisconnect:
            detail = f"{where}: the sender left before its last byte (nothing kept)"
            raise HTTPException(400, detail) from None
        except TierdError as exc:
            raise _refusal(where, exc) from exc


@router.get(
    _FILE,
    operation_id="getPeerFile",
    responses={**_NO_PEER, **_BUSY, **problem_responses(416, description="a Range outside the file")},
)
async def get_file(
    request: Request, _caller: PeerCaller, node: Node, checkpoint_id: CheckpointId, relpath: RelPath
) -> Response:
    """A held file's bytes (``application/octet-stream``), for a restore on the node that sent it.

    ``Range: bytes=FIRST-LAST`` (one range) answers 206 with those bytes only.
    """
    store, where = _locate(request, node, checkpoint_id, relpath)
    try:
        reader = await store.open(where)
    except TierdError as exc:
        raise _refusal(where, exc) from exc
    try:
        first, end = _range(request.headers.get("range"), reader.size)
    except HTTPException:
        await reader.close()
        raise

    async def body() -> AsyncIterator[bytes]:
        try:
            offset = first
            while offset < end:
                buf = bytearray(min(READ_CHUNK, end - offset))
                n = await reader.read_into(offset, memoryview(buf))
                if n <= 0:
                    return  # the file shrank: the fetcher's checksum refuses what came
                offset += n
                yield bytes(buf[:n])
        finally:
            await asyncio.shield(reader.close())

    headers = {"Content-Length": str(end - first), "Accept-Ranges": "bytes"}
    if request.headers.get("range") is None:
        return StreamingResponse(body(), media_type="application/octet-stream", headers=headers)
    headers["Content-Range"] = f"bytes {first}-{end - 1}/{reader.size}"
    return StreamingResponse(body(), 206, media_type="application/octet-stream", headers=headers)


def _range(header: str | None, size: int) -> tuple[int, int]:
    """``(first, end)`` of the bytes a ``Range`` header asks for (the whole file without one).

    Raises HTTPException 416 for anything but one satisfiable ``bytes=FIRST-LAST`` range.
    """
    if header is None:
        return 0, size
    found = _RANGE.match(header)
    if found is None or int(found[1]) >= size or int(found[2]) < int(found[1]):
        raise HTTPException(
            416, f"Range {header[:80]!r}: one range bytes=FIRST-LAST within the file's {size} bytes"
        )
    return int(found[1]), min(int(found[2]), size - 1) + 1


@router.head(_FILE, operation_id="headPeerFile", responses=_NO_PEER)
async def head_file(
    request: Request, _caller: PeerCaller, node: Node, checkpoint_id: CheckpointId, relpath: RelPath
) -> Response:
    """Whether the file is held, and its size (Content-Length)."""
    store, where = _locate(request, node, checkpoint_id, relpath)
    try:
        info = await store.stat(where)
    except TierdError as exc:
        raise _refusal(where, exc) from exc
    return Response(headers={"Content-Length": str(info.size)}, media_type="application/octet-stream")


@router.delete(_FILE, operation_id="deletePeerFile", responses=_NO_PEER)
async def delete_file(
    request: Request, _caller: PeerCaller, node: Node, checkpoint_id: CheckpointId, relpath: RelPath
) -> PeerRemovedOut:
    """Remove one held file (a missing one is fine: ``removed`` 0)."""
    return await _delete(request, node, checkpoint_id, relpath)


@router.delete("/{node}/{checkpoint_id}", operation_id="deletePeerPart", responses=_NO_PEER)
async def delete_part(
    request: Request, _caller: PeerCaller, node: Node, checkpoint_id: CheckpointId
) -> PeerRemovedOut:
    """Remove every file held for ``node``'s part of the checkpoint."""
    return await _delete(request, node, checkpoint_id, "")


async def _delete(request: Request, node: str, checkpoint_id: int, relpath: str) -> PeerRemovedOut:
    store, where = _locate(request, node, checkpoint_id, relpath)
    try:
        return PeerRemovedOut(removed=await store.delete(where))
    except TierdError as exc:
        raise _refusal(where, exc) from exc


def _locate(request: Request, node: str, checkpoint_id: int, relpath: str) -> tuple[PeerStore, str]:
    """The peer store and the file's (or part's) place in it; HTTPException 404 or 422."""
    store: PeerStore | None = request.app.state.peer
    if store is None:
        raise HTTPException(404, "this node has no peer tier (tiers: no kind: peer)")
    try:
        return store, PeerStore.relpath(node, checkpoint_id, relpath)
    except ValueError as exc:
        raise HTTPException(422, f"relpath: {exc}") from None


def _slot_free(store: PeerStore) -> None:
    """Raise HTTPException 503 (Retry-After) when the peer tier moves as many files as it may."""
    if store.slots.locked():
        detail = f"peer tier {store.tier.name}: {store.tier.concurrency} files in flight"
        raise HTTPException(503, detail, {"Retry-After": "1"})


def _refusal(where: str, exc: TierdError) -> HTTPException:
    """The problem a store's error is answered with."""
    if isinstance(exc, NotFound):
        return HTTPException(404, f"{where}: not held here")
    if isinstance(exc, IntegrityError):
        return HTTPException(422, f"refused, nothing kept: {exc}")
    if isinstance(exc, NoSpace):
        return HTTPException(507, str(exc))
    if isinstance(exc, TransientBackendError):
        return HTTPException(503, str(exc), {"Retry-After": "1"})
    return HTTPException(500, str(exc))
