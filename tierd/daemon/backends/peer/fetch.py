"""Reading a node's part back from the peers holding copies of it: the restore's side of the peer tier.

``PeerFetch`` holds one HTTP client with this node's ``peer`` token (connections pooled over
every holder). ``PeerFetch.source(holder, checkpoint_id, owners)`` is a read-only Backend over
the files one holder keeps for a checkpoint (``owners``: each file's relpath -> the node whose
part it is, which names the directory the holder keeps it in). A read is a ``GET`` of the
holder's ``/v1/peer/{node}/{checkpoint}/files/{relpath}`` with one ``Range`` per chunk, so a
file's chunks are read in parallel as from any tier; the bytes are checked against the
CRC64NVME taken at first sight by the write that takes them (as from every tier).

A holder that cannot be reached (refused, timed out: the connect timeout is short), answers
401/403, or goes away mid-read is ``PeerUnavailable``: the restore passes it over for the next
source without calling its copy bad, and every later read of that holder fails at once, with
no new connection tried. 404 is NotFound (the copy is gone: a bad copy), 503 and other 5xx
TransientBackendError (retried).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from urllib.parse import quote

import httpx

from tierd.daemon.backends.base import Backend, Features, ObjectInfo, RangeReader, WriteRequest
from tierd.daemon.backends.budget import ByteBudget, default_budget
from tierd.daemon.backends.peer.choose import PeerNode
from tierd.daemon.backends.peer.client import peer_http
from tierd.errors import NotFound, PermanentBackendError, TransientBackendError

__all__ = ["CONNECT_TIMEOUT", "PeerFetch", "PeerSource", "PeerUnavailable"]

#: Seconds to reach a holder before it is passed over (a dead node does not answer at all).
CONNECT_TIMEOUT = 2.0
#: Seconds a holder may leave a read without a byte.
READ_TIMEOUT = 30.0


class PeerUnavailable(PermanentBackendError):
    """A holder could not be reached, refused this node's token, or went away: try the next source."""


class PeerFetch:
    """HTTP to the holders of this node's parts, with its ``peer`` token (TLS checked by ``verify``)."""

    def __init__(
        self,
        token: str,
        budget: ByteBudget | None = None,
        *,
        verify: bool | str = True,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        """``budget``: what the sources declare (the reads fill the writer's buffers, never their own)."""
        self.budget = budget or default_budget()
        timeout = httpx.Timeout(READ_TIMEOUT, connect=connect_timeout)
        self._http = peer_http(token, verify, timeout)
        #: Holders found unavailable, with why: never tried again by this fetcher (``fork``).
        self.down: dict[str, str] = {}
        self._owner = True

    def fork(self) -> PeerFetch:
        """A fetcher for one restore: the same connections, its own ``down``.

        A holder that came back since is tried again by the next restore. Its ``close``
        leaves the connections open.
        """
        forked = object.__new__(PeerFetch)
        forked.budget, forked._http, forked.down, forked._owner = self.budget, self._http, {}, False
        return forked

    def source(self, holder: PeerNode, checkpoint_id: int, owners: Mapping[str, str]) -> PeerSource:
        """The files ``holder`` keeps of the checkpoint, as a read-only Backend named ``peer:<holder>``."""
        return PeerSource(self, holder, checkpoint_id, owners)

    async def size(self, holder: PeerNode, path: str) -> int:
        """The size of the file at ``path`` on ``holder`` (HEAD). Raises as ``read``."""
        answer = await self._send(holder, self._http.build_request("HEAD", holder.url + path))
        await answer.aclose()
        return int(answer.headers.get("content-length", 0))

    async def read(self, holder: PeerNode, path: str, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` with the file's bytes from ``offset`` (one ranged GET, streamed into it).

        Returns how many came (fewer only when the file is shorter). Raises PeerUnavailable,
        NotFound, TransientBackendError (503, other 5xx), PermanentBackendError.
        """
        last = offset + len(buf) - 1
        request = self._http.build_request(
            "GET", holder.url + path, headers={"Range": f"bytes={offset}-{last}"}
        )
        answer = await self._send(holder, request)
        if answer.status_code != 206:  # the whole file from byte 0: a daemon that ignores Range
            await answer.aclose()
            raise self._gone(holder, "answered a ranged GET with the whole file (a daemon without ranges)")
        filled = 0
        try:
            async for chunk in answer.aiter_raw():
                n = min(len(chunk), len(buf) - filled)
                buf[filled : filled + n] = chunk[:n]
                filled += n
        except httpx.HTTPError as exc:
            raise self._gone(holder, f"{type(exc).__name__} mid-read: {exc}") from exc
        finally:
            await answer.aclose()
        return filled

    async def _send(self, holder: PeerNode, request: httpx.Request) -> httpx.Response:
        """The answer's head (its body still to read). Raises as ``read``."""
        if holder.name in self.down:
            raise PeerUnavailable(f"peer {holder.name}: {self.down[holder.name]} (passed over)")
        try:
            answer = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._gone(holder, f"{type(exc).__name__}: {exc}") from exc
        status = answer.status_code
        if status in (200, 206):
            return answer
        await answer.aclose()
        where = f"peer {holder.name}: {request.url.path}"
        if status in (401, 403):
            raise self._gone(holder, f"{status}: the peer refused this node's token")
        if status == 404:
            raise NotFound(f"{where}: not held there")
        if status >= 500:
            raise TransientBackendError(f"{where}: {status}")
        raise PermanentBackendError(f"{where}: {status}")

    def _gone(self, holder: PeerNode, why: str) -> PeerUnavailable:
        self.down[holder.name] = why
        return PeerUnavailable(f"peer {holder.name} ({holder.url}): {why}")

    async def close(self) -> None:
        """Close the connections (a ``fork`` leaves them to its parent)."""
        if self._owner:
            await self._http.aclose()


class _RangedReader:
    """A file on a holder, each ``read_into`` one ranged GET (``PeerFetch.read``)."""

    def __init__(self, source: PeerSource, path: str, size: int) -> None:
        self.size = size
        self._source = source
        self._path = path

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` from ``offset`` (fewer bytes only at the end). Raises as ``PeerFetch.read``."""
        length = min(len(buf), self.size - offset)
        if length <= 0:
            return 0
        return await self._source.fetch.read(self._source.holder, self._path, offset, buf[:length])

    async def close(self) -> None:
        """Nothing held between reads."""


class PeerSource(Backend):
    """What one holder keeps of one checkpoint, read-only (see the module docstring)."""

    def __init__(
        self, fetch: PeerFetch, holder: PeerNode, checkpoint_id: int, owners: Mapping[str, str]
    ) -> None:
        self.fetch = fetch
        self.holder = holder
        self.checkpoint_id = checkpoint_id
        self.owners = dict(owners)
        self.name = f"peer:{holder.name}"
        self.features = Features(native_checksum=False, server_side_copy=False, multipart=False)
        self.budget = fetch.budget

    def _path(self, relpath: str) -> str:
        node = self.owners.get(relpath)
        if node is None:
            raise NotFound(f"{self.location(relpath)}: no copy of it there")
        return f"/v1/peer/{quote(node)}/{self.checkpoint_id}/files/{quote(relpath)}"

    def location(self, relpath: str) -> str:
        """``peer <holder>:<relpath>``."""
        return f"peer {self.holder.name}:{relpath}"

    async def stat(self, relpath: str) -> ObjectInfo:
        """The held file's size (HEAD). Raises NotFound, PeerUnavailable, Transient/PermanentBackendError."""
        return ObjectInfo(relpath, await self.fetch.size(self.holder, self._path(relpath)), None, None)

    async def open_reader(self, relpath: str) -> RangeReader:
        """A reader of ranged GETs. Raises as ``stat``."""
        path = self._path(relpath)
        return _RangedReader(self, path, await self.fetch.size(self.holder, path))

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """The files it is known to keep (no request is made)."""
        return self._listed(prefix)

    async def _listed(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        for relpath in sorted(self.owners):
            if relpath.startswith(prefix):
                yield ObjectInfo(relpath, 0, None, None)

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Never: raises PermanentBackendError (a restore only reads a peer's copies)."""
        raise self._read_only()

    async def delete(self, relpath: str) -> None:
        """Never: raises PermanentBackendError."""
        raise self._read_only()

    async def hash(self, relpath: str) -> str:
        """Never: raises PermanentBackendError (the write that takes the bytes hashes them)."""
        raise self._read_only()

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        """Never: raises PermanentBackendError."""
        raise self._read_only()

    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        """Nothing to abort."""
        return 0

    async def remove_leftovers(self, relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        """Nothing left here."""
        return 0

    async def close(self) -> None:
        """Nothing: the fetcher owns the connections."""

    def _read_only(self) -> PermanentBackendError:
        return PermanentBackendError(f"{self.name}: a peer's copies are only read back")
