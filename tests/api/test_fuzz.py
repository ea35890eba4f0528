"""The API fuzzed from its own OpenAPI document, over real HTTP.

schemathesis takes the app's OpenAPI document (the one ``/v1/openapi.json`` serves: a test
checks they are equal) and sends every operation in it valid and invalid requests, over
HTTP to the app under uvicorn: a route added later is fuzzed without touching this file.
Each answer must be documented: no 5xx, a status code and content type the operation
declares (``application/problem+json`` for every error), a body matching the declared
schema, and no 503 (the catalog is up: a 503 would be a client error taken for an outage).

It runs with no tokens configured (no header sent; on SQLite and on PostgreSQL, whose
integers and text are narrower), and with tokens configured (sending none, then each
role's), since authentication changes which answers come back. Every integer and string
input sometimes takes a value where the layers below change behaviour (``EDGES``).

It lives in tests/api/ because it exercises tierd.api alone (the app and its uvicorn
service over a catalog), not the daemon process that tests/integration/ starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import CheckContext, Response
from schemathesis.config import SchemathesisConfig

from tests.conftest import posix_config_dict
from tests.fixtures import http
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.served_api import ServedApi
from tierd.api.app import create_app
from tierd.api.schemas.checkpoints import NotifyIn
from tierd.config import Config, PosixTier
from tierd.daemon.backends import make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.catalog.models import Checkpoint, File, Replica, Run
from tierd.daemon.context import Context
from tierd.daemon.retention.service import RetentionService
from tierd.daemon.scrub import ScrubService

TOKENS = {"read": "fuzz-read", "operate": "fuzz-operate", "admin": "fuzz-admin"}
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
]
#: (server, role whose token is sent): no tokens configured, on either catalog; then tokens
#: configured, sending none and each role's.
MODES = [
    ("open_sqlite", None),
    ("open_postgresql", None),
    ("guarded_sqlite", None),
    *(("guarded_sqlite", role) for role in TOKENS),
]

#: Values where the layers under the API change behaviour: the catalog's 32- and 64-bit integer
#: columns, a file name's 255 bytes, NUL (no file name or PostgreSQL text holds one), paths
#: that climb out of a root. Every integer and string input draws from these at times.
EDGES: dict[str, Any] = {
    "integers": {"values": [2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]},
    "strings": {"values": ["a" * 256, "a\x00b", "..", "../..", "/", "/etc/passwd"]},
}
EDGE_PROBABILITY = 0.25
#: Paths that exist in tier 0 (``_seed`` makes them), for any body field named ``path``: a
#: request must get past the path check before its other fields reach the catalog.
TIER0_PATHS = [example["path"] for example in NotifyIn.model_json_schema()["examples"]]


def _seed(db: Database, tier0: Path) -> None:
    """Checkpoints with files and replicas, so lists and details have bodies to check, and in
    tier 0 the directory each documented notify example names, so notify records a step too."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    with db.session() as s:
        run = Run(name="demo")
        for step in range(3):
            ckpt = Checkpoint(
                run=run,
                step=step,
                path=f"demo/s{step}",
                format="dcp",
                created_at=base + timedelta(hours=step),
            )
            ckpt.files.append(
                File(relpath=f"demo/s{step}/.metadata", size=1, checksum_algo="crc64nvme", checksum="A")
            )
            ckpt.replicas.append(Replica(tier="nvme", tier_index=0, state="verified", location="/x"))
            s.add(ckpt)
    for path in TIER0_PATHS:
        (tier0 / path).mkdir(parents=True)
        (tier0 / path / "model.pt").write_bytes(b"weights")


def _serve(root: Path, db_url: str, tokens: list[dict[str, str]]) -> Iterator[ServedApi]:
    root.mkdir()
    catalog = {"url": db_url}
    data = posix_config_dict(root, catalog=catalog, api={"listen": "127.0.0.1:0", "tokens": tokens})
    data["tiers"][1]["scrub"] = {"every": "1d", "bandwidth": "1MB"}  # /v1/tiers shows its progress
    config = Config(**data)
    (root / "nvme" / "demo").mkdir(parents=True)
    db = Database(db_url)
    upgrade(db)
    _seed(db, config.tier0.path)
    for tier in config.tiers:
        if isinstance(tier, PosixTier):
            tier.path.mkdir(parents=True, exist_ok=True)
    ctx = Context(config=config, db=db, watcher_running=True)
    backends = {t.name: make_backend(t) for t in config.tiers}
    # The daemon's retention service and scrubber, not started: the API's reservations,
    # /v1/tiers and verify use them.
    ctx.retention = RetentionService(ctx, backends)
    ctx.scrub = ScrubService(ctx, backends)
    try:
        with ServedApi(ctx) as served:
            yield served
    finally:
        db.dispose()


@pytest.fixture(scope="module")
def open_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApi]:
    """The API over a SQLite catalog with no tokens configured: every caller is anonymous."""
    root = tmp_path_factory.mktemp("fuzz") / "open"
    yield from _serve(root, f"sqlite:///{root / 'catalog.db'}", [])


@pytest.fixture(scope="module")
def open_postgresql(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer
) -> Iterator[ServedApi]:
    """The API over a PostgreSQL catalog (narrower integers, no NUL in text), no tokens."""
    yield from _serve(tmp_path_factory.mktemp("fuzz") / "open", postgres_server.new_database(), [])


@pytest.fixture(scope="module")
def guarded_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApi]:
    """The API over a SQLite catalog with one token per role."""
    root = tmp_path_factory.mktemp("fuzz") / "guarded"
    tokens = [{"name": f"fuzz-{role}", "token": secret, "role": role} for role, secret in TOKENS.items()]
    yield from _serve(root, f"sqlite:///{root / 'catalog.db'}", tokens)


# Its tests share the served APIs (module fixtures): on one xdist worker, served once.
pytestmark = pytest.mark.xdist_group("fuzz")


@pytest.fixture(scope="module")
def modes(
    open_sqlite: ServedApi, open_postgresql: ServedApi, guarded_sqlite: ServedApi
) -> list[tuple[str, ServedApi, dict[str, str]]]:
    """Each mode of ``MODES``: its name, its served app, and the headers to send it."""
    servers = {
        "open_sqlite": open_sqlite,
        "open_postgresql": open_postgresql,
        "guarded_sqlite": guarded_sqlite,
    }
    return [
        (
            f"{server}-{role or 'no-token'}",
            servers[server],
            {"Authorization": f"Bearer {TOKENS[role]}"} if role else {},
        )
        for server, role in MODES
    ]


def _document() -> dict[str, Any]:
    """The app's OpenAPI document, built at collection time so pytest sees one test per operation.

    schemathesis' lazy loader (``from_fixture``) cannot run under pytest 9.2 (it sets
    ``node._nodeid``, which pytest renamed); ``test_the_served_document_is_the_fuzzed_one``
    checks that this is what ``/v1/openapi.json`` serves.
    """
    root = Path("/nonexistent-tierd-fuzz")
    ctx = Context(config=Config(**posix_config_dict(root)), db=Database("sqlite://"))
    return create_app(ctx).openapi()


def _edge_bindings(document: dict[str, Any]) -> dict[str, Any]:
    """Every string and integer parameter and JSON body field, bound to its type's edge values.

    schemathesis binds a type's dictionary only to a schema with a top-level ``type``, which
    FastAPI's optional parameters (``anyOf: [string, null]``) lack, and not to body fields;
    naming each input reaches them all.
    """
    bindings: dict[str, Any] = {}
    for operations in document["paths"].values():
        for operation in operations.values():
            inputs = [(f"{p['in']}.{p['name']}", p["schema"]) for p in operation.get("parameters", [])]
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            fields = _resolve(document, body.get("schema", {})).get("properties", {})
            inputs += [(f"body.{name}", field) for name, field in fields.items()]
            for key, schema in inputs:
                types = {branch.get("type") for branch in [schema, *schema.get("anyOf", [])]}
                for json_type, dictionary in (("string", "strings"), ("integer", "integers")):
                    if json_type in types:
                        bindings[key] = {"dictionary": dictionary, "probability": EDGE_PROBABILITY}
    return bindings


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref", "")
    return document["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema


DOCUMENT = _document()
SETTINGS: dict[str, Any] = {
    "seed": 14,
    "dictionaries": {**EDGES, "tier0_paths": {"values": TIER0_PATHS}},
    "parameters": {
        **_edge_bindings(DOCUMENT),
        "body.path": {"dictionary": "tier0_paths", "probability": 0.5},
    },
    "generation": {
        "mode": "all",
        "max-examples": 25,
        "deterministic": True,
    },
    "phases": {"stateful": {"enabled": False}},
    "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
}
schema = schemathesis.openapi.from_dict(DOCUMENT, config=SchemathesisConfig.from_dict(SETTINGS))


def not_unavailable(ctx: CheckContext, response: Response, case: schemathesis.Case[Any]) -> bool | None:
    """The catalog is up and nothing drains here, so a 503 is a client error misread as an outage."""
    if response.status_code == 503:
        raise AssertionError(f"503 from a healthy daemon: {response.text}")
    return None


@schema.parametrize()
@settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_every_answer_is_documented(
    case: schemathesis.Case[Any], modes: list[tuple[str, ServedApi, dict[str, str]]]
) -> None:
    """Each generated request sent in every mode: the cases are generated once, not once per mode."""
    for name, served, headers in modes:
        try:
            case.call_and_validate(
                base_url=served.base_url, headers=headers, additional_checks=[not_unavailable]
            )
        except BaseException as exc:
            exc.add_note(f"mode: {name}")
            raise


def test_the_served_document_is_the_fuzzed_one(open_sqlite: ServedApi) -> None:
    served = http.get(f"{open_sqlite.base_url}/v1/openapi.json")
    assert served.status_code == 200
    assert served.json() == schema.raw_schema
