"""A small synchronous HTTP client for the tierd API (used by the CLI and training jobs)."""

from __future__ import annotations

from typing import Any

import httpx

from tierd.errors import ApiError

# ApiError lives in tierd.errors with every other error; it is re-exported here because it is
# what this client raises, and callers catch it beside the client they hold.
__all__ = ["ApiError", "Client"]


class Client:
    """Calls ``base_url`` (e.g. ``http://127.0.0.1:8470``) with an optional bearer token."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request and return the decoded JSON body; raises ApiError on 4xx/5xx."""
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError(response.status_code, _detail(response))
        return response.json() if response.content else None

    def ready(self) -> Any:
        """``GET /readyz``."""
        return self.request("GET", "/readyz")

    def checkpoints(self, run: str | None = None, limit: int = 50, offset: int = 0) -> Any:
        """``GET /v1/checkpoints``: one page, newest first."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if run:
            params["run"] = run
        return self.request("GET", "/v1/checkpoints", params=params)

    def checkpoint(self, checkpoint_id: int) -> Any:
        """``GET /v1/checkpoints/{id}``."""
        return self.request("GET", f"/v1/checkpoints/{checkpoint_id}")


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text or response.reason_phrase
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("title") or body)
    return str(body)
