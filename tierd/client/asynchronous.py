"""The job's client as coroutines, on ``httpx.AsyncClient``: :class:`AsyncClient`."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import httpx

from tierd.client import ops
from tierd.client.ops import Call, JsonObject, Local, Op, Pause, Progress, RestoreRequest
from tierd.client.wire import BUSY_RETRIES, PathName, answer, busy_wait, connection_error, settings

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """:class:`Client`'s methods as coroutines, on ``httpx.AsyncClient``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        ca_file: PathName | None = None,
        verify: ssl.SSLContext | bool | None = None,
    ) -> None:
        """:meth:`Client.__init__`."""
        self._http = httpx.AsyncClient(**settings(url, token, timeout, ca_file=ca_file, verify=verify))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _run(self, op: Op[T]) -> T:
        sent: Any = None
        while True:
            try:
                need = op.send(sent)
            except StopIteration as done:
                return cast(T, done.value)
            if isinstance(need, Pause):
                await asyncio.sleep(need.seconds)
                sent = None
            elif isinstance(need, Local):
                sent = await asyncio.to_thread(need.work)
            else:
                sent = answer(need, await self._send(need))

    async def _send(self, call: Call) -> httpx.Response:
        """:meth:`Client._send`, waiting without blocking the loop."""
        for attempt in range(BUSY_RETRIES + 1):
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.json
                )
            except httpx.TransportError as exc:
                raise connection_error(self._http.base_url, exc) from exc
            if (wait := busy_wait(response, attempt)) is None:
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
        return await self._run(ops.notify(run, step, path, metrics, format, world_size))

    async def latest(self, run: str, *, tier: str | None = None, durable: bool = False) -> JsonObject | None:
        """:meth:`Client.latest`."""
        return await self._run(ops.latest(run, tier, durable))

    async def wait_durable(
        self, run: str, step: int, *, tier: str | None = None, timeout: float = 600.0, poll: float = 1.0
    ) -> JsonObject:
        """:meth:`Client.wait_durable`; raises WaitTimeout."""
        return await self._run(ops.wait_durable(run, step, tier, timeout, poll))

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
        return await self._run(ops.restore(request, wait, progress, poll))

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
        return await self._run(ops.ensure_local(run, step, Path(dest), ranks, durable))

    async def reserve(self, tier: str, nbytes: int) -> JsonObject:
        """:meth:`Client.reserve`."""
        return await self._run(ops.reserve(tier, nbytes))
