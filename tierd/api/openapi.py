"""The OpenAPI document describes itself: each operation's role, summary, tag and the API's info.

Each operation's role comes from the dependency that checks it: ``deps.require_role`` marks its
check with ``needs(role)``, and ``describe`` (called by ``problems.ProblemRoute`` as a route is
made) finds that mark among the route's dependencies, so the document cannot name another role
than the one enforced. The role goes into the operation as ``x-tierd-role`` (``public`` for a
route that checks none: the gate's ``PUBLIC_PATHS``) and as the last paragraph of its
description. The summary is the first line
of the route's docstring, the description the rest. The operationIds are each route's own
(``operation_id=``, lowerCamelCase); ``tests/api/test_openapi.py`` pins them and lints the
document.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

__all__ = ["DESCRIPTION", "ROLE_EXTENSION", "TAGS", "describe", "needs", "role_of"]

F = TypeVar("F", bound=Callable[..., Any])
ROLE_EXTENSION = "x-tierd-role"
PUBLIC = "public"
_ROLE_ATTR = "__tierd_role__"

DESCRIPTION = """\
tierd copies checkpoints from a node's fast tier to slower, durable ones, keeps what each
tier's retention says, and restores them. This API is what training jobs, the `tierd`
command and dashboards call.

**Authentication.** With `api.tokens` configured, every operation but the public ones
(health, readiness, metrics, this document) needs `Authorization: Bearer <token>`; a token
grants a role, and roles are ordered: `admin` may do what `operate` may, and `operate` what
`read` may. The `peer` role stands apart: another daemon's token, it may only hold, give back
and remove peer copies (`/v1/peer`), and no other role may. Each operation names the role it
needs in its description and in `x-tierd-role`. Without tokens (only on a loopback address,
or with `api.allow_anonymous`) every caller is admin.

**Errors** are RFC 9457 problem details (`application/problem+json`): `status`, `title`,
`detail`. A 503 with `Retry-After` means busy: send the request again after that wait.

**Versions.** Paths start with `/v1`; a client of any tierd version speaks to a daemon of any
other while both speak `/v1`. Fields may be added to answers, never removed or renamed.
"""

_TAG_TEXT = {
    "checkpoints": "List and inspect checkpoints; record one (notify); pin, hold, delete, verify",
    "runs": "Each run's newest complete step: what a job asks to resume",
    "tiers": "What each tier holds and how full it is; room reserved before a save",
    "restores": "Put a checkpoint back from the nearest verified copy; follow it, cancel it",
    "jobs": "Work in flight: copies, replicas being deleted, restores",
    "retention": "What each tier's retention keeps, deletes and leaves blocked, and why",
    "audit": "Every pin, hold, deletion, eviction, restore and refusal: who, when and why",
    "fleet": "Every daemon on this catalog, its heartbeat, and who leads the shared tiers",
    "peer": "Other nodes' parts held on this node: put, get, head, delete (the peer role only)",
    "usage": "What each tier holds and costs a month, what retention saved, and in 30 days",
    "health": "Liveness and readiness, for supervisors and load balancers",
    "metrics": "Prometheus exposition",
}
#: Each route's tag with its description, in the order a reader meets them.
TAGS = [{"name": name, "description": text} for name, text in _TAG_TEXT.items()]


def needs(role: str) -> Callable[[F], F]:
    """Mark a dependency as the check that admits callers of ``role`` or above."""

    def mark(dependency: F) -> F:
        setattr(dependency, _ROLE_ATTR, role)
        return dependency

    return mark


def role_of(route: APIRoute) -> str:
    """The role ``route`` checks with one of its dependencies, or ``public`` when it checks none."""
    return _role(route.dependant) or PUBLIC


def _role(dependant: Dependant) -> str | None:
    for sub in dependant.dependencies:
        found = getattr(sub.call, _ROLE_ATTR, None) or _role(sub)
        if found:
            return str(found)
    return None


def describe(route: APIRoute) -> None:
    """Give ``route``'s operation its summary and description (its docstring's) and its role.

    Called as the route is made (``problems.ProblemRoute``), before any document is built.
    """
    role = role_of(route)
    summary, _, rest = inspect.cleandoc(route.endpoint.__doc__ or "").partition("\n")
    # Docstrings mark code ``so``: plain text in a summary, Markdown's `so` in a description.
    route.summary = route.summary or summary.strip().rstrip(".").replace("``", "")
    rest = rest.strip().replace("``", "`")
    route.description = "\n\n".join(part for part in (rest, _role_text(role)) if part)
    route.openapi_extra = {**(route.openapi_extra or {}), ROLE_EXTENSION: role}


def _role_text(role: str) -> str:
    if role == PUBLIC:
        return f"**Role:** `{PUBLIC}`: no token needed."
    return f"**Role:** `{role}` or above (its bearer token, when `api.tokens` is set)."
