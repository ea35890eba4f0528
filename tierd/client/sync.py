"""The job's client, synchronously: :class:`Client`."""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import httpx

from tierd.client import ops
from tierd.client.ops import Call, JsonObject, Local, Op, Pause, Progress, RestoreRequest
from tierd.client.wire import BUSY_RETRIES, PathName, answer, busy_wait, connection_error, settings

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """tierd's API, synchronously: ``url`` defaults to ``$TIERD_URL``, ``token`` to ``$TIERD_TOKEN``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        ca_file: PathName | None = None,
        verify: ssl.SSLContext | bool | None = None,
    ) -> None:
        """Talk to ``url``; an HTTPS daemon's certificate is checked against ``ca_file``.

        Without ``ca_file``: ``$TIERD_CA_FILE``, else the system's trust store. ``verify``
        instead: a context of your own (``tierd.client.tls_context(client_cert=...)`` for a
        daemon that requires client certificates), or False to check nothing. Raises
        ConfigError for a CA or client certificate file that cannot be used.
        """
        self._http = httpx.Client(**settings(url, token, timeout, ca_file=ca_file, verify=verify))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _run(self, op: Op[T]) -> T:
        sent: Any = None
        while True:
            try:
                need = op.send(sent)
            except StopIteration as done:
                return cast(T, done.value)
            if isinstance(need, Pause):
                time.sleep(need.seconds)
                sent = None
            elif isinstance(need, Local):
                sent = need.work()
            else:
                sent = answer(need, self._send(need))

    def _send(self, call: Call) -> httpx.Response:
        """Send ``call``, again after the wait a busy daemon asks for (``BUSY_RETRIES`` times)."""
        for attempt in range(BUSY_RETRIES + 1):
            try:
                response = self._http.request(call.method, call.path, params=call.params, json=call.json)
            except httpx.TransportError as exc:
                raise connection_error(self._http.base_url, exc) from exc
            if (wait := busy_wait(response, attempt)) is None:
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
        return self._run(ops.notify(run, step, path, metrics, format, world_size))

    def latest(self, run: str, *, tier: str | None = None, durable: bool = False) -> JsonObject | None:
        """The run's newest complete step (verified on ``tier``, or on a durable tier), or None."""
        return self._run(ops.latest(run, tier, durable))

    def wait_durable(
        self, run: str, step: int, *, tier: str | None = None, timeout: float = 600.0, poll: float = 1.0
    ) -> JsonObject:
        """Wait until the step is verified on ``tier`` (default: any durable tier); returns it.

        Raises WaitTimeout after ``timeout`` seconds, ApiError, Unreachable.
        """
        return self._run(ops.wait_durable(run, step, tier, timeout, poll))

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
        return self._run(ops.restore(request, wait, progress, poll))

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
        return self._run(ops.ensure_local(run, step, Path(dest), ranks, durable))

    def reserve(self, tier: str, nbytes: int) -> JsonObject:
        """Make room for ``nbytes`` on a POSIX tier before a save.

        Raises ApiError (404: not a POSIX tier; 409: no room, with what blocks it in ``problem``).
        """
        return self._run(ops.reserve(tier, nbytes))
