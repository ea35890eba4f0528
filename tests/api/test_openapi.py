"""The OpenAPI document describes itself, and a linter finds nothing in it.

``openapi-spec-validator`` checks it against the OpenAPI 3.1 schema; ``lint`` checks what a
reader of the document relies on: each operation's id, summary, tag, role (``x-tierd-role``,
also in its description) and its problems. The role the document names is the role the API
enforces: each operation is called over HTTP with the tokens of each role.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from tests.conftest import posix_config_dict
from tests.fixtures import http
from tests.fixtures.served_api import ServedApi
from tierd.api.app import create_app
from tierd.api.gate import PUBLIC_PATHS
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.context import Context

# Its tests share one served API (the module fixture): on one xdist worker, started once.
pytestmark = pytest.mark.xdist_group("openapi")

ROLES = ("public", "read", "operate", "admin", "peer")
TOKENS = {"read": "r-token", "operate": "o-token", "admin": "a-token", "peer": "p-token"}
PROBLEM = {"$ref": "#/components/schemas/Problem"}
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
#: Every operation's id, by method and path: renaming one breaks every generated client.
OPERATION_IDS = {
    ("get", "/livez"): "getLiveness",
    ("get", "/healthz"): "getHealth",
    ("get", "/readyz"): "getReadiness",
    ("get", "/metrics"): "getMetrics",
    ("get", "/v1/checkpoints"): "listCheckpoints",
    ("post", "/v1/checkpoints"): "notifyCheckpoint",
    ("get", "/v1/checkpoints/{checkpoint_id}"): "getCheckpoint",
    ("delete", "/v1/checkpoints/{checkpoint_id}"): "deleteCheckpoint",
    ("put", "/v1/checkpoints/{checkpoint_id}/pin"): "pinCheckpoint",
    ("delete", "/v1/checkpoints/{checkpoint_id}/pin"): "unpinCheckpoint",
    ("post", "/v1/checkpoints/{checkpoint_id}/holds"): "addHold",
    ("delete", "/v1/checkpoints/{checkpoint_id}/holds/{name}"): "releaseHold",
    ("put", "/v1/checkpoints/{checkpoint_id}/metrics"): "setCheckpointMetrics",
    ("post", "/v1/checkpoints/{checkpoint_id}/undelete"): "undeleteCheckpoint",
    ("post", "/v1/checkpoints/{checkpoint_id}/verify"): "verifyCheckpoint",
    ("post", "/v1/checkpoints/{checkpoint_id}/tier0-check"): "checkTier0",
    ("get", "/v1/runs"): "listRuns",
    ("get", "/v1/runs/{run}/latest"): "getLatestStep",
    ("get", "/v1/tiers"): "listTiers",
    ("post", "/v1/tiers/{tier}/reservations"): "reserveSpace",
    ("get", "/v1/retention/plan"): "getRetentionPlan",
    ("get", "/v1/audit"): "listAuditEvents",
    ("post", "/v1/restores"): "createRestore",
    ("get", "/v1/restores"): "listRestores",
    ("get", "/v1/restores/{restore_id}"): "getRestore",
    ("delete", "/v1/restores/{restore_id}"): "cancelRestore",
    ("get", "/v1/jobs"): "listJobs",
    ("get", "/v1/fleet"): "getFleet",
    ("put", "/v1/peer/{node}/{checkpoint_id}/files/{relpath}"): "putPeerFile",
    ("get", "/v1/peer/{node}/{checkpoint_id}/files/{relpath}"): "getPeerFile",
    ("head", "/v1/peer/{node}/{checkpoint_id}/files/{relpath}"): "headPeerFile",
    ("delete", "/v1/peer/{node}/{checkpoint_id}/files/{relpath}"): "deletePeerFile",
    ("delete", "/v1/peer/{node}/{checkpoint_id}"): "deletePeerPart",
    ("get", "/v1/usage"): "getUsage",
}


def _document() -> dict[str, Any]:
    ctx = Context(config=Config(**posix_config_dict(Path("/nonexistent-tierd"))), db=Database("sqlite://"))
    return create_app(ctx).openapi()


DOCUMENT = _document()


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every operation: its method, path and OpenAPI object."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method, path, operation


def lint(document: dict[str, Any]) -> list[str]:
    """What a reader (or a client generator) of ``document`` would stumble on; empty when clean."""
    problems = []
    if not document["info"].get("description"):
        problems.append("info: no description")
    declared = {tag["name"]: tag.get("description") for tag in document.get("tags", [])}
    used: set[str] = set()
    seen: dict[str, str] = {}
    for method, path, operation in operations(document):
        where = f"{method.upper()} {path}"
        problems += [f"{where}: {p}" for p in _operation_problems(operation, declared)]
        used.update(operation.get("tags", []))
        op_id = operation.get("operationId", "")
        if op_id in seen:
            problems.append(f"{where}: operationId {op_id} is also {seen[op_id]}'s")
        seen[op_id] = where
    problems += [f"tags: {name} is used by no operation" for name in sorted(set(declared) - used)]
    return problems


def _operation_problems(operation: dict[str, Any], declared: dict[str, str | None]) -> list[str]:
    problems = []
    if not re.fullmatch(r"[a-z][a-zA-Z0-9]+", operation.get("operationId", "")):
        problems.append(f"operationId {operation.get('operationId')!r} is not lowerCamelCase")
    summary = operation.get("summary", "")
    if not summary or summary.endswith(".") or len(summary) > 100 or "`" in summary:
        problems.append(f"summary {summary!r}: wanted, plain text, at most 100 characters, no final period")
    tags = operation.get("tags", [])
    if len(tags) != 1 or not declared.get(tags[0]):
        problems.append(f"tags {tags}: wanted one, declared with a description")
    role = operation.get("x-tierd-role")
    if role not in ROLES:
        problems.append(f"x-tierd-role {role!r} is not one of {ROLES}")
    elif f"**Role:** `{role}`" not in operation.get("description", ""):
        problems.append(f"the description does not name its role ({role})")
    responses = operation["responses"]
    if role in ROLES[1:] and not {"401", "403"} <= set(responses):
        problems.append("a role is needed but 401 and 403 are not documented")
    if (operation.get("parameters") or operation.get("requestBody")) and "422" not in responses:
        problems.append("takes input but documents no 422")
    for status, response in responses.items():
        content = response.get("content", {}).get("application/problem+json", {})
        if status[0] in "45" and content.get("schema") != PROBLEM:
            problems.append(f"response {status} is not documented as a Problem (application/problem+json)")
    return problems


def test_the_document_is_valid_openapi() -> None:
    assert DOCUMENT["openapi"].startswith("3.1")
    validate(DOCUMENT)


def test_the_lint_finds_nothing() -> None:
    assert lint(DOCUMENT) == []


def test_the_lint_finds_what_it_looks_for() -> None:
    """Each rule fires on a document that breaks it (the lint is not vacuous)."""
    broken: dict[str, Any] = {
        "info": {"title": "t", "version": "1"},
        "tags": [{"name": "unused", "description": "d"}, {"name": "bare"}],
        "paths": {
            "/a": {
                "get": {
                    "operationId": "get_a",
                    "summary": "Gets a.",
                    "tags": ["bare"],
                    "parameters": [{"name": "x", "in": "query"}],
                    "responses": {"200": {"description": "ok"}, "404": {"description": "no"}},
                },
                "post": {
                    "operationId": "get_a",
                    "summary": "Post a",
                    "tags": ["unused"],
                    "x-tierd-role": "admin",
                    "description": "no role here",
                    "responses": {"200": {"description": "ok"}},
                },
            }
        },
    }
    found = "\n".join(lint(broken))
    for expected in (
        "info: no description",
        "operationId 'get_a' is not lowerCamelCase",
        "summary 'Gets a.'",
        "tags ['bare']: wanted one, declared with a description",
        "x-tierd-role None",
        "takes input but documents no 422",
        "response 404 is not documented as a Problem",
        "operationId get_a is also GET /a's",
        "the description does not name its role (admin)",
    ):
        assert expected in found, expected


def test_operation_ids_are_stable() -> None:
    found = {(method, path): operation["operationId"] for method, path, operation in operations(DOCUMENT)}
    assert found == OPERATION_IDS


def test_the_public_operations_are_the_gates_public_paths() -> None:
    public = {path for _, path, operation in operations(DOCUMENT) if operation["x-tierd-role"] == "public"}
    assert public == {path for path in PUBLIC_PATHS if not path.startswith(("/v1/docs", "/v1/openapi"))}


def test_the_roles_table_of_operations_md_is_the_documents() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    table = text[text.index("| role | operations |") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", table, re.M)
    documented = {role: set(re.findall(r"`(\w+ [^`]+)`", cells)) for role, cells in rows}
    found: dict[str, set[str]] = {}
    for method, path, operation in operations(DOCUMENT):
        found.setdefault(operation["x-tierd-role"], set()).add(f"{method.upper()} {path}")
    assert documented == found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApi]:
    root = tmp_path_factory.mktemp("roles")
    tokens = [{"name": role, "token": token, "role": role} for role, token in TOKENS.items()]
    config = Config(**posix_config_dict(root, api={"listen": "127.0.0.1:0", "tokens": tokens}))
    database = Database(f"sqlite:///{root / 'catalog.db'}")
    upgrade(database)
    with ServedApi(Context(config=config, db=database, watcher_running=True)) as api:
        yield api
    database.dispose()


def _called(served: ServedApi, method: str, path: str, role: str | None) -> int:
    url = path.format(checkpoint_id=1, restore_id=1, name="h", run="demo", tier="nvme", node="n", relpath="f")
    headers = {"Authorization": f"Bearer {TOKENS[role]}"} if role else {}
    return http.request(method, f"{served.base_url}{url}", headers=headers, timeout=30).status_code


@pytest.mark.parametrize(("method", "path"), sorted(OPERATION_IDS))
def test_each_operation_needs_the_role_it_documents(served: ServedApi, method: str, path: str) -> None:
    """A token one role below is refused (403), the documented role is not (no 401 or 403).

    ``peer`` stands apart: only a peer token may call its operations (an admin's is refused),
    and a peer token may call no other. Nothing the calls could change exists (no
    checkpoint, restore, body or peer tier), so each ends in a 404, 409 or 422 at most.
    """
    role = DOCUMENT["paths"][path][method]["x-tierd-role"]
    if role == "public":
        assert _called(served, method, path, None) not in (401, 403)
        return
    assert _called(served, method, path, None) == 401
    if role == "peer":
        assert _called(served, method, path, "admin") == 403
    else:
        assert _called(served, method, path, "peer") == 403
    if role not in ("read", "peer"):
        below = ROLES[ROLES.index(role) - 1]
        assert _called(served, method, path, below) == 403
    assert _called(served, method, path, role) not in (401, 403)
