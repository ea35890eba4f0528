"""The CLI's synchronous HTTP client for the daemon's API: one method per call a command makes.

Training jobs use :mod:`tierd.client` instead (httpx and the standard library only). Every
method returns the decoded JSON body and raises ApiError when the API answers 4xx/5xx
(its ``problem`` holds the problem+json body); a daemon that cannot be reached raises
Unreachable, and one whose certificate is not trusted Untrusted (as the job's client does).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import quote

from tierd.errors import ApiError

if TYPE_CHECKING:
    import httpx

__all__ = ["DaemonApi", "JsonObject", "PlanAction"]

#: A JSON object as the API answers it (its shape is in tierd.api.schemas).
JsonObject = dict[str, Any]
PlanAction = Literal["keep", "delete", "blocked"]


class DaemonApi:
    """Calls ``base_url`` (e.g. ``http://127.0.0.1:8470``) with an optional bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        import httpx  # only when a command calls the API: ``tierd run`` never does

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, verify=verify)

    def __enter__(self) -> DaemonApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request and return the decoded JSON body.

        Raises ApiError on 4xx/5xx, Unreachable or Untrusted when no answer came.
        """
        import httpx

        from tierd.client.wire import connection_error

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise connection_error(self._http.base_url, exc) from exc
        if response.status_code >= 400:
            problem = _problem(response)
            raise ApiError(response.status_code, _detail(response, problem), problem)
        return response.json() if response.content else None

    def _object(self, method: str, path: str, **kwargs: Any) -> JsonObject:
        return cast(JsonObject, self.request(method, path, **kwargs))

    def ready(self) -> JsonObject:
        """``GET /readyz``; raises ApiError (503) when the daemon is not ready."""
        return self._object("GET", "/readyz")

    def checkpoints(
        self, run: str | None = None, limit: int = 50, offset: int = 0, step: int | None = None
    ) -> JsonObject:
        """``GET /v1/checkpoints``: one page, newest first, of one run (and step) when given."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if run:
            params["run"] = run
        if step is not None:
            params["step"] = step
        return self._object("GET", "/v1/checkpoints", params=params)

    def checkpoint(self, checkpoint_id: int) -> JsonObject:
        """``GET /v1/checkpoints/{id}`` with its files; raises ApiError (404) for an unknown id."""
        return self._object("GET", f"/v1/checkpoints/{checkpoint_id}")

    def pin(self, checkpoint_id: int, reason: str = "") -> JsonObject:
        """``PUT /v1/checkpoints/{id}/pin``: keep it on every tier; raises ApiError (404)."""
        return self._object("PUT", f"/v1/checkpoints/{checkpoint_id}/pin", json={"reason": reason})

    def unpin(self, checkpoint_id: int, reason: str = "") -> JsonObject:
        """``DELETE /v1/checkpoints/{id}/pin``: give it back to retention; raises ApiError (404)."""
        return self._object("DELETE", f"/v1/checkpoints/{checkpoint_id}/pin", params={"reason": reason})

    def add_hold(self, checkpoint_id: int, name: str, reason: str) -> JsonObject:
        """``POST /v1/checkpoints/{id}/holds`` (admin); raises ApiError (404, 409 if the name is set)."""
        body = {"name": name, "reason": reason}
        return self._object("POST", f"/v1/checkpoints/{checkpoint_id}/holds", json=body)

    def release_hold(self, checkpoint_id: int, name: str, reason: str = "") -> JsonObject:
        """``DELETE /v1/checkpoints/{id}/holds/{name}`` (admin); raises ApiError (404 for an unknown hold)."""
        path = f"/v1/checkpoints/{checkpoint_id}/holds/{quote(name, safe='')}"
        return self._object("DELETE", path, params={"reason": reason})

    def delete(self, checkpoint_id: int, reason: str) -> JsonObject:
        """``DELETE /v1/checkpoints/{id}`` (admin): delete on every tier after its delay.

        Raises ApiError (404; 409 when pinned or held).
        """
        return self._object("DELETE", f"/v1/checkpoints/{checkpoint_id}", params={"reason": reason})

    def undelete(self, checkpoint_id: int, reason: str = "") -> JsonObject:
        """``POST /v1/checkpoints/{id}/undelete``: cancel its deletions and pin it.

        Raises ApiError (404; 409 when nothing is left to undelete).
        """
        return self._object("POST", f"/v1/checkpoints/{checkpoint_id}/undelete", json={"reason": reason})

    def verify(self, checkpoint_id: int) -> JsonObject:
        """``POST /v1/checkpoints/{id}/verify``: re-check every replica now; the result per tier.

        Raises ApiError (404 for an unknown checkpoint).
        """
        return self._object("POST", f"/v1/checkpoints/{checkpoint_id}/verify")

    def runs(self) -> JsonObject:
        """``GET /v1/runs``: every run with its newest complete step, and newest verified per tier."""
        return self._object("GET", "/v1/runs")

    def latest(self, run: str, tier: str | None = None, durable: bool = False) -> JsonObject:
        """``GET /v1/runs/{run}/latest``: the newest complete step (verified on ``tier``, or durable).

        Raises ApiError (404 when no step qualifies, or no such run or tier).
        """
        params: dict[str, Any] = {"durable": "true"} if durable else {}
        if tier is not None:
            params["tier"] = tier
        return self._object("GET", f"/v1/runs/{quote(run, safe='')}/latest", params=params)

    def tiers(self) -> list[JsonObject]:
        """``GET /v1/tiers``: every tier in order, with its space and replicas by state."""
        return cast(list[JsonObject], self.request("GET", "/v1/tiers"))

    def reserve(self, tier: str, size: int) -> JsonObject:
        """``POST /v1/tiers/{tier}/reservations``: make room for ``size`` bytes.

        Raises ApiError (404 for a tier that is not POSIX; 409 when the room cannot be made,
        with what blocks it in ``problem["blocked"]``).
        """
        path = f"/v1/tiers/{quote(tier, safe='')}/reservations"
        return self._object("POST", path, json={"bytes": size})

    def audit(
        self, checkpoint_id: int | None = None, limit: int = 100, before: int | None = None
    ) -> JsonObject:
        """``GET /v1/audit``: events newest first, of one checkpoint when given."""
        params: dict[str, Any] = {"limit": limit}
        if checkpoint_id is not None:
            params["checkpoint_id"] = checkpoint_id
        if before is not None:
            params["before"] = before
        return self._object("GET", "/v1/audit", params=params)

    def restore(self, body: JsonObject) -> JsonObject:
        """``POST /v1/restores`` with a RestoreIn ``body``: the restore, queued (202).

        Raises ApiError (404 unknown checkpoint or run; 409 nothing verified to restore from;
        422 a refused target or a malformed body).
        """
        return self._object("POST", "/v1/restores", json=body)

    def restore_status(self, restore_id: int) -> JsonObject:
        """``GET /v1/restores/{id}``: state, progress, rate and ETA; raises ApiError (404)."""
        return self._object("GET", f"/v1/restores/{restore_id}")

    def restores(self, state: str | None = None, limit: int = 100) -> JsonObject:
        """``GET /v1/restores``: restores newest first, only in ``state`` when given."""
        params: dict[str, Any] = {"limit": limit} | ({"state": state} if state else {})
        return self._object("GET", "/v1/restores", params=params)

    def cancel_restore(self, restore_id: int, reason: str = "") -> JsonObject:
        """``DELETE /v1/restores/{id}``: cancel it, remove what it wrote; raises ApiError (404, 409 done)."""
        params = {"reason": reason} if reason else {}
        return self._object("DELETE", f"/v1/restores/{restore_id}", params=params)

    def fleet(self) -> JsonObject:
        """``GET /v1/fleet``: every node, its heartbeat and whether it leads."""
        return self._object("GET", "/v1/fleet")

    def jobs(self) -> JsonObject:
        """``GET /v1/jobs``: copies, deletions and restores in flight."""
        return self._object("GET", "/v1/jobs")

    def usage(self, cadence_days: int = 7, runs: int = 50) -> JsonObject:
        """``GET /v1/usage``: bytes and cost per tier, storage class and run; a 30-day projection."""
        return self._object("GET", "/v1/usage", params={"cadence_days": cadence_days, "runs": runs})

    def retention_plan(
        self, tier: str | None = None, run: str | None = None, action: PlanAction | None = None
    ) -> JsonObject:
        """``GET /v1/retention/plan``: what each tier's retention would keep, delete and leave blocked."""
        given = {"tier": tier, "run": run, "action": action}
        return self._object("GET", "/v1/retention/plan", params={k: v for k, v in given.items() if v})


def _problem(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _detail(response: httpx.Response, problem: dict[str, Any] | None) -> str:
    if problem is not None:
        return str(problem.get("detail") or problem.get("title") or problem)
    return response.text or response.reason_phrase
