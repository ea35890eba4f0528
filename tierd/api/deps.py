"""FastAPI dependencies: the daemon context, the catalog session and bearer-token roles.

Routes take them as ``Annotated`` aliases: ``ContextDep``, ``ReadSessionDep``, ``SessionDep``,
and ``Reader``, ``Operator``, ``Admin`` (each the caller's name once its token grants that
role), and ``PeerCaller`` (another daemon's ``peer`` token: that role and no other grants the
peer routes, and it grants nothing else, not even ``read``); ``CallerRole`` is the role the
caller's token grants, for a route whose parts need more than the route does. The role checks
and sessions carry the problems they may answer (``answers``), so every route using them
documents 401, 403 and 503 without saying so itself; a role check also names its role
(``openapi.needs``), which the OpenAPI document gives as the operation's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tierd.api.openapi import needs
from tierd.api.problems import answers, problem_responses
from tierd.daemon.catalog.db import Session
from tierd.daemon.context import Context
from tierd.errors import CatalogError

__all__ = [
    "Admin",
    "CallerRole",
    "ContextDep",
    "Operator",
    "PeerCaller",
    "ReadSessionDep",
    "Reader",
    "Role",
    "SessionDep",
    "require_role",
]

Role = Literal["read", "operate", "admin", "peer"]
_RANK = {"peer": -1, "read": 0, "operate": 1, "admin": 2}
_bearer = HTTPBearer(auto_error=False)
_AUTH_PROBLEMS = {
    **problem_responses(401, description="tokens are configured and none, or an unknown one, was sent"),
    **problem_responses(403, description="the token's role is below the one this operation needs"),
}
_CATALOG_PROBLEMS = problem_responses(CatalogError)


def get_context(request: Request) -> Context:
    """The daemon's shared context."""
    ctx: Context = request.app.state.ctx
    return ctx


ContextDep = Annotated[Context, Depends(get_context)]


@answers(_CATALOG_PROBLEMS)
def read_session(ctx: ContextDep) -> Iterator[Session]:
    """A read-only catalog session for one request; raises CatalogError."""
    with ctx.db.read_session() as session:
        yield session


@answers(_CATALOG_PROBLEMS)
def write_session(ctx: ContextDep) -> Iterator[Session]:
    """A catalog session that commits when the request succeeds; raises CatalogError."""
    with ctx.db.session() as session:
        yield session


# scope="function": the session closes (and commits) before the response is sent. FastAPI's
# default closes it after, so a client could read the old state right after a 200, and a
# commit that failed would already have been answered 200.
ReadSessionDep = Annotated[Session, Depends(read_session, scope="function")]
SessionDep = Annotated[Session, Depends(write_session, scope="function")]


def role_at_least(granted: Role, needed: Role) -> bool:
    """Whether the role ``granted`` includes ``needed`` (``peer`` includes only itself, and only it)."""
    if "peer" in (granted, needed):
        return granted == needed
    return _RANK[granted] >= _RANK[needed]


def caller_role(
    ctx: ContextDep, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Role:
    """The role the caller's token grants: ``admin`` with authentication off, ``read`` for none.

    No token or an unknown one is ``read``: the route's own role check answers those 401.
    """
    if not ctx.tokens.enabled:
        return "admin"
    token = None if creds is None else ctx.tokens.find(creds.credentials)
    return "read" if token is None else token.role


def require_role(role: Role) -> Callable[..., str]:
    """A dependency that admits callers whose token grants ``role`` or more; returns their name.

    With no tokens configured, authentication is off and the caller is ``anonymous``
    (tierd listens on 127.0.0.1 by default for that reason).
    """

    @needs(role)  # the OpenAPI document names the role from here (tierd.api.openapi)
    @answers(_AUTH_PROBLEMS)
    def check(
        ctx: ContextDep,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> str:
        if not ctx.tokens.enabled:
            return "anonymous"
        if creds is None:
            raise HTTPException(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
        token = ctx.tokens.find(creds.credentials)
        if token is None:
            raise HTTPException(401, "unknown bearer token", {"WWW-Authenticate": "Bearer"})
        if not role_at_least(token.role, role):
            raise HTTPException(403, f"token {token.name!r} has role {token.role}, needs {role}")
        return token.name

    return check


Reader = Annotated[str, Depends(require_role("read"))]
Operator = Annotated[str, Depends(require_role("operate"))]
Admin = Annotated[str, Depends(require_role("admin"))]
PeerCaller = Annotated[str, Depends(require_role("peer"))]
CallerRole = Annotated[Role, Depends(caller_role)]
