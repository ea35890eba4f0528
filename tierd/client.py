"""What a training job imports to talk to tierd: httpx and the standard library only.

::

    from tierd.client import Client

    tierd = Client()                      # $TIERD_URL (default http://127.0.0.1:8470), $TIERD_TOKEN
    tierd.notify("llama", 1000, "/nvme/ckpt/llama/step_1000", metrics={"eval_loss": 1.92})
    tierd.wait_durable("llama", 1000, timeout=600)
    path = tierd.ensure_local("llama", "latest", "/nvme/ckpt/llama/resume")

:class:`AsyncClient` has the same methods, as coroutines. Every operation is written once, as a
generator that yields what it needs done (an HTTP call, a pause, a look at the local disk), and
each client runs it with its own I/O. Errors are tierd's: :class:`~tierd.errors.ApiError` (the
problem's status and detail), :class:`~tierd.errors.Unreachable`, :class:`~tierd.errors.WaitTimeout`,
:class:`~tierd.errors.NotFound` (nothing to resume from) and :class:`~tierd.errors.TierdError`
(a restore that failed or was cancelled).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar, cast
from urllib.parse import quote

import httpx

from tierd.errors import ApiError, NotFound, TierdError, Unreachable, WaitTimeout

__all__ = ["DEFAULT_URL", "AsyncClient", "Client", "JsonObject", "Progress"]

DEFAULT_URL = "http://127.0.0.1:8470"
#: A JSON object as the API answers it (its shape is in the API's OpenAPI document).
JsonObject = dict[str, Any]
#: Called with the restore job (``RestoreOut``) each time it is polled.
Progress = Callable[[JsonObject], None]
FINISHED = frozenset({"done", "failed", "cancelled"})
T = TypeVar("T")


@dataclass(frozen=True)
class _Call:
    """An HTTP call; with ``missing_ok`` a 404 answers None instead of raising."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    missing_ok: bool = False


@dataclass(frozen=True)
class _Pause:
    seconds: float


@dataclass(frozen=True)
class _Local:
    """Blocking work on the local disk (run in a thread by the async client)."""

    work: Callable[[], Any]


_Op = Generator[_Call | _Pause | _Local, Any, T]


def _notify(
    run: str,
    step: int,
    path: str | os.PathLike[str],
    metrics: Mapping[str, float] | None,
    fmt: str | None,
    world_size: int | None,
) -> _Op[JsonObject]:
    body: JsonObject = {"run": run, "step": step, "path": os.fspath(path)}
    given = {"metrics": dict(metrics) if metrics else None, "format": fmt, "world_size": world_size}
    body.update({k: v for k, v in given.items() if v is not None})
    return cast(JsonObject, (yield _Call("POST", "/v1/checkpoints", json=body)))


def _latest(run: str, tier: str | None, durable: bool) -> _Op[JsonObject | None]:
    params: dict[str, Any] = {"durable": "true"} if durable else {}
    if tier is not None:
        params["tier"] = tier
    path = f"/v1/runs/{quote(run, safe='')}/latest"
    return cast(JsonObject | None, (yield _Call("GET", path, params=params, missing_ok=True)))


def _durable_tiers() -> _Op[set[str]]:
    tiers = yield _Call("GET", "/v1/tiers")
    return {t["name"] for t in tiers if t["durable"]}


def _find_step(run: str, step: int) -> _Op[JsonObject | None]:
    page = yield _Call("GET", "/v1/checkpoints", params={"run": run, "step": step, "limit": 1})
    return cast(JsonObject, page["items"][0]) if page["items"] else None


def _wait_durable(run: str, step: int, tier: str | None, timeout: float, poll: float) -> _Op[JsonObject]:
    wanted = {tier} if tier is not None else (yield from _durable_tiers())
    deadline = time.monotonic() + timeout
    while True:
        found = yield from _find_step(run, step)
        if found is not None and any(
            r["tier"] in wanted and r["state"] == "verified" for r in found["replicas"]
        ):
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            where = tier or "a durable tier"
            seen = "not recorded" if found is None else _replica_states(found)
            raise WaitTimeout(f"{run}:{step} not verified on {where} after {timeout:g} s ({seen})")
        yield _Pause(min(poll, left))


def _replica_states(checkpoint: JsonObject) -> str:
    return " ".join(f"{r['tier']}={r['state']}" for r in checkpoint["replicas"]) or "no replicas"


@dataclass(frozen=True)
class RestoreRequest:
    """What to restore and where (the body of ``POST /v1/restores``)."""

    checkpoint_id: int | None = None
    run: str | None = None
    step: int | None = None
    latest: bool = False
    target: str | os.PathLike[str] | None = None
    to_tier0: bool = False
    files: Sequence[str] | None = None
    ranks: Sequence[int] | None = None
    source_tier: str | None = None
    overwrite: bool = False

    def body(self) -> JsonObject:
        """The JSON body, with only the fields given."""
        given: JsonObject = {
            "checkpoint_id": self.checkpoint_id,
            "run": self.run,
            "step": self.step,
            "latest": True if self.latest else None,
            "target": os.fspath(self.target) if self.target is not None else None,
            "to": "tier0" if self.to_tier0 else None,
            "files": list(self.files) if self.files is not None else None,
            "ranks": list(self.ranks) if self.ranks is not None else None,
            "source_tier": self.source_tier,
            "overwrite": True if self.overwrite else None,
        }
        return {k: v for k, v in given.items() if v is not None}


def _restore(request: RestoreRequest, wait: bool, progress: Progress | None, poll: float) -> _Op[JsonObject]:
    job = cast(JsonObject, (yield _Call("POST", "/v1/restores", json=request.body())))
    while True:
        if progress is not None:
            progress(job)
        if not wait or job["state"] in FINISHED:
            return job
        yield _Pause(poll)
        job = yield _Call("GET", f"/v1/restores/{job['id']}")


def _ensure_local(
    run: str, step: int | Literal["latest"], dest: Path, ranks: Sequence[int] | None, durable: bool
) -> _Op[Path]:
    if step == "latest":
        found = yield from _latest(run, None, durable)
        if found is None:
            kind = "durable " if durable else ""
            raise NotFound(f"run {run!r} has no {kind}complete step to restore")
    else:
        found = yield from _find_step(run, step)
        if found is None:
            raise NotFound(f"run {run!r} has no checkpoint at step {step}")
    checkpoint = yield _Call("GET", f"/v1/checkpoints/{found['id']}")
    if (yield from _holds(checkpoint, dest, ranks)):
        return dest
    job = yield from _restore(
        RestoreRequest(checkpoint_id=checkpoint["id"], target=dest, ranks=ranks, overwrite=True),
        wait=True,
        progress=None,
        poll=0.5,
    )
    if job["state"] != "done":
        raise TierdError(f"restore {job['id']} of {run}:{checkpoint['step']} {job['state']}: {job['error']}")
    return dest


def _holds(checkpoint: JsonObject, dest: Path, ranks: Sequence[int] | None) -> _Op[bool]:
    """Whether ``dest`` already holds the checkpoint, verified by the daemon.

    It does when ``dest`` is where tier 0's verified replica is (the folder of a one-file
    checkpoint) and the daemon, asked now, finds every file still there at its recorded size
    (``tier0-check``: else it marks the replica and ``dest`` is restored); or when a restore
    of this checkpoint into ``dest`` finished there (the daemon checked every byte) and every
    file it restored is still there at its recorded size. A restore by ranks counts only for
    the same ranks (when the restore says which it took).
    """
    tier0 = [
        r["location"]
        for r in checkpoint["replicas"]
        if r["tier_index"] == 0 and r["state"] == "verified" and r["location"]
    ]
    if [f["path"] for f in checkpoint["files"]] == [checkpoint["path"]]:  # one file: dest is its folder
        tier0 = [str(PurePosixPath(location).parent) for location in tier0]
    if (yield _Local(functools.partial(_is_one_of, dest, tier0))):
        path = f"/v1/checkpoints/{checkpoint['id']}/tier0-check"
        check = yield _Call("POST", path, missing_ok=True)
        if check is None or check["here"]:  # None: a daemon older than the check trusts its catalog
            return True
    listing = yield _Call("GET", "/v1/restores", params={"state": "done", "limit": 100}, missing_ok=True)
    restored = {
        job["target"]: job["files_total"]
        for job in (listing or {}).get("items", [])
        if job["checkpoint_id"] == checkpoint["id"]
        and job["files_done"] == job["files_total"]
        and _covers(job.get("ranks"), ranks)
    }
    sizes = {_relative(f["path"], checkpoint["path"]): f["size"] for f in checkpoint["files"]}
    return cast(bool, (yield _Local(functools.partial(_on_disk, dest, restored, sizes))))


def _covers(taken: list[int] | None, wanted: Sequence[int] | None) -> bool:
    if wanted is None:
        return not taken
    return taken is None or set(wanted) <= set(taken)


def _is_one_of(dest: Path, locations: list[str]) -> bool:
    here = dest.resolve()
    return any(Path(location).resolve() == here for location in locations)


def _on_disk(dest: Path, restored: Mapping[str, int], sizes: Mapping[str, int]) -> bool:
    here = dest.resolve()
    totals = [total for target, total in restored.items() if Path(target).resolve() == here]
    return bool(totals) and _present(here, sizes) >= min(totals)


def _relative(file_path: str, checkpoint_path: str) -> str:
    """A file's path inside a restore's target (a single-file checkpoint lands under its name)."""
    inside = PurePosixPath(file_path)
    base = PurePosixPath(checkpoint_path)
    return inside.relative_to(base).as_posix() if inside != base else inside.name


def _present(root: Path, sizes: Mapping[str, int]) -> int:
    """How many of the files are under ``root`` at their recorded size; -1 if any has another size."""
    count = 0
    for relpath, size in sizes.items():
        try:
            actual = (root / relpath).stat().st_size
        except OSError:
            continue
        if actual != size:
            return -1
        count += 1
    return count


def _reserve(tier: str, nbytes: int) -> _Op[JsonObject]:
    path = f"/v1/tiers/{quote(tier, safe='')}/reservations"
    return cast(JsonObject, (yield _Call("POST", path, json={"bytes": nbytes})))


def _settings(url: str | None, token: str | None, timeout: float) -> dict[str, Any]:
    token = token if token is not None else os.environ.get("TIERD_TOKEN")
    return {
        "base_url": url or os.environ.get("TIERD_URL") or DEFAULT_URL,
        "headers": {"Authorization": f"Bearer {token}"} if token else {},
        "timeout": timeout,
    }


#: How often a call the daemon turned away as busy (503 with Retry-After) is sent again.
BUSY_RETRIES = 5
_BUSY_WAIT_CAP = 10.0


def _busy_wait(response: httpx.Response, attempt: int) -> float | None:
    """Seconds to wait before sending again a call answered 503 with Retry-After; None: do not.

    The daemon answers so before doing any of the call's work (too many requests at once, or
    the catalog away), so sending it again is safe.
    """
    if response.status_code != 503 or attempt >= BUSY_RETRIES:
        return None
    try:
        return min(max(float(response.headers["Retry-After"]), 0.05), _BUSY_WAIT_CAP)
    except (KeyError, ValueError):
        return None


def _answer(call: _Call, response: httpx.Response) -> Any:
    """The decoded body; None for a 404 the call expects; raises ApiError for any other 4xx/5xx."""
    if call.missing_ok and response.status_code == 404:
        return None
    if response.status_code >= 400:
        problem: dict[str, Any] | None = None
        try:
            body = response.json()
            problem = body if isinstance(body, dict) else None
        except ValueError:
            pass
        detail = str((problem or {}).get("detail") or response.text or response.reason_phrase)
        raise ApiError(response.status_code, detail, problem)
    return response.json() if response.content else None


class Client:
    """tierd's API, synchronously: ``url`` defaults to ``$TIERD_URL``, ``token`` to ``$TIERD_TOKEN``."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        self._http = httpx.Client(**_settings(url, token, timeout))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _run(self, op: _Op[T]) -> T:
        sent: Any = None
        while True:
            try:
                need = op.send(sent)
            except StopIteration as done:
                return cast(T, done.value)
            if isinstance(need, _Pause):
                time.sleep(need.seconds)
                sent = None
            elif isinstance(need, _Local):
                sent = need.work()
            else:
                sent = _answer(need, self._send(need))

    def _send(self, call: _Call) -> httpx.Response:
        """Send ``call``, again after the wait a busy daemon asks for (``BUSY_RETRIES`` times)."""
        for attempt in range(BUSY_RETRIES + 1):
            try:
                response = self._http.request(call.method, call.path, params=call.params, json=call.json)
            except httpx.TransportError as exc:
                raise Unreachable(f"cannot reach tierd at {self._http.base_url}: {exc}") from exc
            if (wait := _busy_wait(response, attempt)) is None:
                break
            time.sleep(wait)
        return response

    def notify(
        self,
        run: str,
        step: int,
        path: str | os.PathLike[str],
        *,
        metrics: Mapping[str, float] | None = None,
        format: str | None = None,
        world_size: int | None = None,
    ) -> JsonObject:
        """Record step ``step`` of ``run`` at ``path`` (absolute in tier 0, or relative to it).

        Returns the checkpoint (state ``waiting`` while the format's detector disagrees).
        Raises ApiError (422: a path outside tier 0 or missing), Unreachable.
        """
        return self._run(_notify(run, step, path, metrics, format, world_size))

    def latest(self, run: str, *, tier: str | None = None, durable: bool = False) -> JsonObject | None:
        """The run's newest complete step (verified on ``tier``, or on a durable tier), or None."""
        return self._run(_latest(run, tier, durable))

    def wait_durable(
        self, run: str, step: int, *, tier: str | None = None, timeout: float = 600.0, poll: float = 1.0
    ) -> JsonObject:
        """Wait until the step is verified on ``tier`` (default: any durable tier); returns it.

        Raises WaitTimeout after ``timeout`` seconds, ApiError, Unreachable.
        """
        return self._run(_wait_durable(run, step, tier, timeout, poll))

    def restore(
        self,
        *,
        checkpoint_id: int | None = None,
        run: str | None = None,
        step: int | None = None,
        latest: bool = False,
        target: str | os.PathLike[str] | None = None,
        to_tier0: bool = False,
        files: Sequence[str] | None = None,
        ranks: Sequence[int] | None = None,
        source_tier: str | None = None,
        overwrite: bool = False,
        wait: bool = True,
        progress: Progress | None = None,
        poll: float = 0.5,
    ) -> JsonObject:
        """Start a restore; with ``wait``, poll it (calling ``progress``) until it ends; returns it.

        Its ``state`` says how it ended. Raises ApiError (404, 409 nothing verified, 422), Unreachable.
        """
        request = RestoreRequest(
            checkpoint_id, run, step, latest, target, to_tier0, files, ranks, source_tier, overwrite
        )
        return self._run(_restore(request, wait, progress, poll))

    def ensure_local(
        self,
        run: str,
        step: int | Literal["latest"],
        dest: str | os.PathLike[str],
        *,
        ranks: Sequence[int] | None = None,
        durable: bool = True,
    ) -> Path:
        """``dest`` holding the step, restored there only if it does not hold it verified already.

        ``step`` is a step or ``"latest"``: the newest complete step, verified on a durable tier
        unless ``durable=False``. ``ranks`` restores only those ranks' shards (and the metadata).
        Raises NotFound (nothing to restore), TierdError (the restore failed), ApiError, Unreachable.
        """
        return self._run(_ensure_local(run, step, Path(dest), ranks, durable))

    def reserve(self, tier: str, nbytes: int) -> JsonObject:
        """Make room for ``nbytes`` on a POSIX tier before a save.

        Raises ApiError (404: not a POSIX tier; 409: no room, with what blocks it in ``problem``).
        """
        return self._run(_reserve(tier, nbytes))


class AsyncClient:
    """:class:`Client`'s methods as coroutines, on ``httpx.AsyncClient``."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(**_settings(url, token, timeout))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _run(self, op: _Op[T]) -> T:
        sent: Any = None
        while True:
            try:
                need = op.send(sent)
            except StopIteration as done:
                return cast(T, done.value)
            if isinstance(need, _Pause):
                await asyncio.sleep(need.seconds)
                sent = None
            elif isinstance(need, _Local):
                sent = await asyncio.to_thread(need.work)
            else:
                sent = _answer(need, await self._send(need))

    async def _send(self, call: _Call) -> httpx.Response:
        """:meth:`Client._send`, waiting without blocking the loop."""
        for attempt in range(BUSY_RETRIES + 1):
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.json
                )
            except httpx.TransportError as exc:
                raise Unreachable(f"cannot reach tierd at {self._http.base_url}: {exc}") from exc
            if (wait := _busy_wait(response, attempt)) is None:
                break
            await asyncio.sleep(wait)
        return response

    async def notify(
        self,
        run: str,
        step: int,
        path: str | os.PathLike[str],
        *,
        metrics: Mapping[str, float] | None = None,
        format: str | None = None,
        world_size: int | None = None,
    ) -> JsonObject:
        """:meth:`Client.notify`."""
        return await self._run(_notify(run, step, path, metrics, format, world_size))

    async def latest(self, run: str, *, tier: str | None = None, durable: bool = False) -> JsonObject | None:
        """:meth:`Client.latest`."""
        return await self._run(_latest(run, tier, durable))

    async def wait_durable(
        self, run: str, step: int, *, tier: str | None = None, timeout: float = 600.0, poll: float = 1.0
    ) -> JsonObject:
        """:meth:`Client.wait_durable`; raises WaitTimeout."""
        return await self._run(_wait_durable(run, step, tier, timeout, poll))

    async def restore(
        self,
        *,
        checkpoint_id: int | None = None,
        run: str | None = None,
        step: int | None = None,
        latest: bool = False,
        target: str | os.PathLike[str] | None = None,
        to_tier0: bool = False,
        files: Sequence[str] | None = None,
        ranks: Sequence[int] | None = None,
        source_tier: str | None = None,
        overwrite: bool = False,
        wait: bool = True,
        progress: Progress | None = None,
        poll: float = 0.5,
    ) -> JsonObject:
        """:meth:`Client.restore`."""
        request = RestoreRequest(
            checkpoint_id, run, step, latest, target, to_tier0, files, ranks, source_tier, overwrite
        )
        return await self._run(_restore(request, wait, progress, poll))

    async def ensure_local(
        self,
        run: str,
        step: int | Literal["latest"],
        dest: str | os.PathLike[str],
        *,
        ranks: Sequence[int] | None = None,
        durable: bool = True,
    ) -> Path:
        """:meth:`Client.ensure_local`."""
        return await self._run(_ensure_local(run, step, Path(dest), ranks, durable))

    async def reserve(self, tier: str, nbytes: int) -> JsonObject:
        """:meth:`Client.reserve`."""
        return await self._run(_reserve(tier, nbytes))
