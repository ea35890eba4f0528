"""Sending a file of this node's part to its peers, and fetching it back, over their APIs.

``PeerClient.send`` streams one file from a RangeReader to a peer's ``PUT /v1/peer/...``:
the size declared up front (Content-Length), the CRC64NVME taken at first sight in
``x-tierd-crc64nvme``, the bytes read 1 MiB at a time from the buffer budget (never the whole
file in memory) and paced by ``pace`` (the tier's bandwidth limit). ``replicate`` sends it to
``replicas`` peers in the order ``choose.ring_order`` gives: a peer that cannot be reached,
is full (507) or busy, is passed over for the next; a body the peer refused as not hashing
to its checksum (422: a byte changed in flight) is sent to it again, up to ``RESENDS`` times.

Errors (``PeerRefused``): what a peer answered, or that it could not be reached; the
``status`` says which (0: not reached). Each refusal of a file is also told to ``on_refusal``
by its reason (``refusal_reason``: the daemon counts them in ``tierd_peer_refusals_total``).

``peer_http`` makes the HTTP client this and ``fetch.PeerFetch`` talk to peers with: its TLS
context (the CA file or the system's bundle, read and parsed) is made at the first ``https://``
request, not with the client. A fleet on plain HTTP never needs one, and the two clients of a
peer daemon held theirs from start-up on: 2 MiB of its resident size (a PostgreSQL peer daemon
at ready 107 -> 105 MiB, at its peak moving 768 MiB 141 -> 139 MiB, three runs each).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast
from urllib.parse import quote

import httpx

from tierd.daemon.backends.base import RangeReader, read_full
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.peer import rawput
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.store import CHECKSUM_HEADER
from tierd.daemon.backends.posix.reader import PosixReader
from tierd.errors import TransientBackendError
from tierd.logs import get_logger

__all__ = [
    "REFUSAL_REASONS",
    "RESENDS",
    "SEND_CHUNK",
    "Pace",
    "PeerClient",
    "PeerFile",
    "PeerRefused",
    "peer_http",
    "refusal_reason",
    "trust",
]

log = get_logger(__name__)
SEND_CHUNK = 1 * MIB
#: How often a body a peer refused as damaged (422) is sent to it again before the next peer.
RESENDS = 2
Pace = Callable[[int], Awaitable[None]]
Opener = Callable[[], Awaitable[RangeReader]]
#: Why a peer did not take a file: full (507), busy (503), forbidden (401, 403: the token),
#: dead (not reached), mismatch (422: the bytes did not hash to their checksum), other.
REFUSAL_REASONS = ("full", "busy", "forbidden", "dead", "mismatch", "other")
_REASONS = {507: "full", 503: "busy", 401: "forbidden", 403: "forbidden", 0: "dead", 422: "mismatch"}


def refusal_reason(status: int) -> str:
    """The reason (one of ``REFUSAL_REASONS``) of a ``PeerRefused`` with this ``status``."""
    return _REASONS.get(status, "other")


class PeerRefused(TransientBackendError):
    """A peer did not take the file: its answer's status (0: it could not be reached)."""

    def __init__(self, peer: str, status: int, detail: str) -> None:
        super().__init__(f"peer {peer}: {status or 'unreachable'}: {detail}")
        self.peer = peer
        self.status = status


@dataclass(frozen=True)
class PeerFile:
    """One file of this node's part: whose, of which checkpoint, where, and its first-sight checksum."""

    node: str
    checkpoint_id: int
    relpath: str
    checksum: str

    def path(self) -> str:
        """The file's path under a peer's API."""
        return f"/v1/peer/{quote(self.node)}/{self.checkpoint_id}/files/{quote(self.relpath)}"


class PeerClient:
    """HTTP to the fleet's peers with this node's ``peer`` token (TLS checked by ``verify``)."""

    def __init__(
        self,
        token: str,
        budget: ByteBudget,
        *,
        verify: bool | str = True,
        timeout: float = 60.0,
        pace: Pace | None = None,
        on_refusal: Callable[[str], None] | None = None,
    ) -> None:
        """Over ``budget``'s buffers, with ``token``.

        ``verify``: the CA file for https peers (True: the system's); ``pace``: awaited per
        chunk; ``on_refusal``: called with the reason of each file a peer did not take.
        """
        self.budget = budget
        self.pace = pace
        self.on_refusal = on_refusal
        self.timeout = timeout
        self._token = token
        self._http = peer_http(token, verify, timeout)

    async def send(self, peer: PeerNode, file: PeerFile, reader: RangeReader) -> None:
        """Send ``reader``'s bytes to ``peer``; raises PeerRefused unless it answered 201.

        An open file to an ``http://`` peer goes by ``rawput`` (the kernel copies it to the
        connection); anything else, and over TLS, through httpx from the buffer budget.
        """
        if isinstance(reader, PosixReader) and reader.fileno() >= 0 and peer.url.startswith("http://"):
            await self._send_file(peer, file, reader)
            return
        headers = {CHECKSUM_HEADER: file.checksum, "Content-Length": str(reader.size)}
        try:
            answer = await self._http.put(
                peer.url + file.path(), content=self._chunks(reader, file.relpath), headers=headers
            )
        except httpx.HTTPError as exc:
            raise PeerRefused(peer.name, 0, f"{type(exc).__name__}: {exc}") from exc
        if answer.status_code != 201:
            raise PeerRefused(peer.name, answer.status_code, _problem_detail(answer.content))

    async def _send_file(self, peer: PeerNode, file: PeerFile, reader: PosixReader) -> None:
        """``send`` by ``rawput.put_file``: the body by ``os.sendfile``, no byte of it in this process."""
        headers = {"Authorization": f"Bearer {self._token}", CHECKSUM_HEADER: file.checksum}
        try:
            url, fd = peer.url + file.path(), reader.fileno()
            status, body = await rawput.put_file(
                url, headers, fd, reader.size, pace=self.pace, timeout=self.timeout
            )
        except rawput.Unreached as exc:
            raise PeerRefused(peer.name, 0, str(exc)) from exc
        if status != 201:
            raise PeerRefused(peer.name, status, _problem_detail(body))

    async def replicate(
        self,
        order: Sequence[PeerNode],
        replicas: int,
        file: PeerFile,
        open_reader: Callable[[], Awaitable[RangeReader]],
    ) -> list[PeerNode]:
        """Send ``file`` to the first ``replicas`` peers of ``order`` that take it; those peers.

        Fewer when too few took it (each refusal logged ``peer_refused``).
        """
        held: list[PeerNode] = []
        for peer in order:
            if len(held) == replicas:
                break
            if await self._send_to(peer, file, open_reader):
                held.append(peer)
        return held

    async def _send_to(self, peer: PeerNode, file: PeerFile, open_reader: Opener) -> bool:
        """Whether ``peer`` took the file (resent after a 422, up to ``RESENDS`` times)."""
        try:
            await self.deliver(peer, file, open_reader)
        except PeerRefused:
            return False
        return True

    async def deliver(self, peer: PeerNode, file: PeerFile, open_reader: Opener) -> None:
        """Send ``file`` to ``peer``, again after a 422 (up to ``RESENDS`` times).

        Raises the last PeerRefused when it did not take it (each refusal logged ``peer_refused``).
        """
        for attempt in range(RESENDS + 1):
            reader = await open_reader()
            try:
                await self.send(peer, file, reader)
                return
            except PeerRefused as exc:
                log.warning(
                    "peer_refused", peer=peer.name, path=file.relpath, status=exc.status, error=str(exc)
                )
                if self.on_refusal is not None:
                    self.on_refusal(refusal_reason(exc.status))
                if exc.status != 422 or attempt == RESENDS:
                    raise
            finally:
                await reader.close()

    async def held_size(self, peer: PeerNode, file: PeerFile) -> int | None:
        """The size of ``file`` as ``peer`` holds it (HEAD); None when it does not, or did not say."""
        try:
            answer = await self._http.head(peer.url + file.path())
        except httpx.HTTPError:
            return None
        length = answer.headers.get("content-length", "")
        return int(length) if answer.status_code == 200 and length.isdigit() else None

    async def drop(self, peer: PeerNode, node: str, checkpoint_id: int) -> int:
        """Remove ``node``'s part of the checkpoint from ``peer``; how many files it removed.

        Raises PeerRefused when the peer could not be reached or did not answer 200.
        """
        path = f"/v1/peer/{quote(node)}/{checkpoint_id}"
        try:
            answer = await self._http.delete(peer.url + path)
        except httpx.HTTPError as exc:
            raise PeerRefused(peer.name, 0, f"{type(exc).__name__}: {exc}") from exc
        if answer.status_code != 200:
            raise PeerRefused(peer.name, answer.status_code, _problem_detail(answer.content))
        return int(answer.json().get("removed", 0))

    async def _chunks(self, reader: RangeReader, where: str) -> AsyncIterator[bytes]:
        """The file's bytes, each chunk lent from a reused budget buffer while it is sent.

        No copy of its own: the HTTP layer (h11) copies a chunk into the bytes it writes before
        it asks for the next one, when the buffer goes back (reused: no page faults refilling
        a fresh one).
        """
        offset = 0
        while offset < reader.size:
            length = min(SEND_CHUNK, reader.size - offset)
            if self.pace is not None:
                await self.pace(length)
            async with self.budget.aligned(SEND_CHUNK) as whole:
                with whole[:length] as view:
                    await read_full(reader, offset, view, where=where)
                    offset += length
                    yield cast(bytes, view)

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()


def peer_http(token: str, verify: bool | str, timeout: float | httpx.Timeout) -> httpx.AsyncClient:
    """An HTTP client with the ``peer`` token; ``https://`` peers checked by ``verify`` (``trust``).

    Plain HTTP goes through a transport that speaks no TLS; ``https://`` through one made at its
    first request (``_TlsOnFirstUse``).
    """
    return httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
        transport=httpx.AsyncHTTPTransport(verify=False),  # every http:// URL: no TLS spoken
        mounts={"https://": _TlsOnFirstUse(verify)},  # every https:// URL
    )


class _TlsOnFirstUse(httpx.AsyncBaseTransport):
    """httpx's transport with certificates checked by ``verify``, made at the first request."""

    def __init__(self, verify: bool | str) -> None:
        self._verify = verify
        self._inner: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` over TLS (the transport and its context made now if not yet)."""
        if self._inner is None:
            self._inner = httpx.AsyncHTTPTransport(verify=trust(self._verify))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the connections, if any were made."""
        if self._inner is not None:
            await self._inner.aclose()


def trust(verify: bool | str) -> bool | ssl.SSLContext:
    """What httpx checks peers' certificates with: ``verify``, a CA file read into a context.

    (httpx deprecates a path: a DeprecationWarning for every client made with one.)
    """
    return ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify


def _problem_detail(body: bytes) -> str:
    """The ``detail`` of a problem+json body (its first 200 characters when it is not one)."""
    try:
        return str(json.loads(body).get("detail", body[:200].decode(errors="replace")))
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")
