"""What both clients do alike on the wire.

The connection's settings (``$TIERD_URL``, ``$TIERD_TOKEN``), the wait a busy daemon asks for,
and an answer turned into its JSON or an :class:`~tierd.errors.ApiError`.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from tierd.client.ops import Call
from tierd.errors import ApiError

__all__ = ["BUSY_RETRIES", "DEFAULT_URL", "answer", "busy_wait", "settings"]

DEFAULT_URL = "http://127.0.0.1:8470"


def settings(url: str | None, token: str | None, timeout: float) -> dict[str, Any]:
    """The arguments of an httpx client: ``url`` or ``$TIERD_URL``, ``token`` or ``$TIERD_TOKEN``."""
    token = token if token is not None else os.environ.get("TIERD_TOKEN")
    return {
        "base_url": url or os.environ.get("TIERD_URL") or DEFAULT_URL,
        "headers": {"Authorization": f"Bearer {token}"} if token else {},
        "timeout": timeout,
    }


#: How often a call the daemon turned away as busy (503 with Retry-After) is sent again.
BUSY_RETRIES = 5
_BUSY_WAIT_CAP = 10.0


def busy_wait(response: httpx.Response, attempt: int) -> float | None:
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


def answer(call: Call, response: httpx.Response) -> Any:
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
