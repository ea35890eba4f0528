"""Every operation of the job's client, written once as a generator.

Each yields what it needs done (a :class:`Call` over HTTP, a :class:`Pause`, :class:`Local`
work on the local disk) and is sent back the result; :class:`~tierd.client.sync.Client` and
:class:`~tierd.client.asynchronous.AsyncClient` run it, each with its own I/O.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar, cast
from urllib.parse import quote

from tierd.errors import NotFound, TierdError, WaitTimeout

__all__ = [
    "FINISHED",
    "Call",
    "JsonObject",
    "Local",
    "Op",
    "Pause",
    "Progress",
    "RestoreRequest",
    "ensure_local",
    "latest",
    "notify",
    "reserve",
    "restore",
    "wait_durable",
]

#: A JSON object as the API answers it (its shape is in the API's OpenAPI document).
JsonObject = dict[str, Any]
#: Called with the restore job (``RestoreOut``) each time it is polled.
Progress = Callable[[JsonObject], None]
FINISHED = frozenset({"done", "failed", "cancelled"})
T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """An HTTP call; with ``missing_ok`` a 404 answers None instead of raising."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    missing_ok: bool = False


@dataclass(frozen=True)
class Pause:
    """A wait of ``seconds`` (on the wall clock, or the event loop's)."""

    seconds: float


@dataclass(frozen=True)
class Local:
    """Blocking work on the local disk (run in a thread by the async client)."""

    work: Callable[[], Any]


Op = Generator[Call | Pause | Local, Any, T]


def notify(
    run: str,
    step: int,
    path: str | os.PathLike[str],
    metrics: Mapping[str, float] | None,
    fmt: str | None,
    world_size: int | None,
) -> Op[JsonObject]:
    """``POST /v1/checkpoints``: record the step; the checkpoint."""
    body: JsonObject = {"run": run, "step": step, "path": os.fspath(path)}
    given = {"metrics": dict(metrics) if metrics else None, "format": fmt, "world_size": world_size}
    body.update({k: v for k, v in given.items() if v is not None})
    return cast(JsonObject, (yield Call("POST", "/v1/checkpoints", json=body)))


def latest(run: str, tier: str | None, durable: bool) -> Op[JsonObject | None]:
    """The run's newest complete step (verified on ``tier``, or durable), or None."""
    params: dict[str, Any] = {"durable": "true"} if durable else {}
    if tier is not None:
        params["tier"] = tier
    path = f"/v1/runs/{quote(run, safe='')}/latest"
    return cast(JsonObject | None, (yield Call("GET", path, params=params, missing_ok=True)))


def _durable_tiers() -> Op[set[str]]:
    tiers = yield Call("GET", "/v1/tiers")
    return {t["name"] for t in tiers if t["durable"]}


def _find_step(run: str, step: int) -> Op[JsonObject | None]:
    page = yield Call("GET", "/v1/checkpoints", params={"run": run, "step": step, "limit": 1})
    return cast(JsonObject, page["items"][0]) if page["items"] else None


def wait_durable(run: str, step: int, tier: str | None, timeout: float, poll: float) -> Op[JsonObject]:
    """The step once verified on ``tier`` (or any durable tier); raises WaitTimeout after ``timeout``."""
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
        yield Pause(min(poll, left))


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


def restore(request: RestoreRequest, wait: bool, progress: Progress | None, poll: float) -> Op[JsonObject]:
    """Start the restore and, with ``wait``, poll it until it ends; the restore job."""
    job = cast(JsonObject, (yield Call("POST", "/v1/restores", json=request.body())))
    while True:
        if progress is not None:
            progress(job)
        if not wait or job["state"] in FINISHED:
            return job
        yield Pause(poll)
        job = yield Call("GET", f"/v1/restores/{job['id']}")


def ensure_local(
    run: str, step: int | Literal["latest"], dest: Path, ranks: Sequence[int] | None, durable: bool
) -> Op[Path]:
    """``dest``, holding the step: restored there unless it holds it verified already."""
    if step == "latest":
        found = yield from latest(run, None, durable)
        if found is None:
            kind = "durable " if durable else ""
            raise NotFound(f"run {run!r} has no {kind}complete step to restore")
    else:
        found = yield from _find_step(run, step)
        if found is None:
            raise NotFound(f"run {run!r} has no checkpoint at step {step}")
    checkpoint = yield Call("GET", f"/v1/checkpoints/{found['id']}")
    if (yield from _holds(checkpoint, dest, ranks)):
        return dest
    job = yield from restore(
        RestoreRequest(checkpoint_id=checkpoint["id"], target=dest, ranks=ranks, overwrite=True),
        wait=True,
        progress=None,
        poll=0.5,
    )
    if job["state"] != "done":
        raise TierdError(f"restore {job['id']} of {run}:{checkpoint['step']} {job['state']}: {job['error']}")
    return dest


def _holds(checkpoint: JsonObject, dest: Path, ranks: Sequence[int] | None) -> Op[bool]:
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
    if (yield Local(functools.partial(_is_one_of, dest, tier0))):
        path = f"/v1/checkpoints/{checkpoint['id']}/tier0-check"
        check = yield Call("POST", path, missing_ok=True)
        if check is None or check["here"]:  # None: a daemon older than the check trusts its catalog
            return True
    listing = yield Call("GET", "/v1/restores", params={"state": "done", "limit": 100}, missing_ok=True)
    restored = {
        job["target"]: job["files_total"]
        for job in (listing or {}).get("items", [])
        if job["checkpoint_id"] == checkpoint["id"]
        and job["files_done"] == job["files_total"]
        and _covers(job.get("ranks"), ranks)
    }
    sizes = {_relative(f["path"], checkpoint["path"]): f["size"] for f in checkpoint["files"]}
    return cast(bool, (yield Local(functools.partial(_on_disk, dest, restored, sizes))))


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


def reserve(tier: str, nbytes: int) -> Op[JsonObject]:
    """``POST /v1/tiers/{tier}/reservations``: room for ``nbytes`` on a POSIX tier."""
    path = f"/v1/tiers/{quote(tier, safe='')}/reservations"
    return cast(JsonObject, (yield Call("POST", path, json={"bytes": nbytes})))
