"""A daemon loads what its configuration uses: no S3 stack without an S3 tier, no PostgreSQL
driver for a SQLite catalog, no Alembic to check the schema (20, 9 and 7 MB of resident
memory of a daemon that is 128 MB with all three), and never what it does not use at all:
rich and pygments (structlog's and httpx's terminal output), pydantic.v1 (FastAPI's check
for v1 models)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

#: Imported only when needed: by an S3 tier, a PostgreSQL catalog, ``tierd db upgrade``.
LAZY = ("aioboto3", "aiobotocore", "botocore", "boto3", "aiohttp", "psycopg", "alembic", "mako")


#: Never imported by a daemon, though installed with the dev extra (``tierd.hidden``).
NEVER = ("rich", "pygments", "pydantic.v1")

#: Imported by the CLI's commands that call the API (httpx, through the job's client) or print
#: the completion script (shtab), never by the parser ``tierd run`` builds.
CLI_COMMANDS_ONLY = ("httpx", "tierd.client", "shtab")

#: A daemon with POSIX tiers only, built (not started) over ``sys.argv[1]``: the library
#: modules it imported, as JSON.
POSIX_DAEMON = """
import json, sys
from pathlib import Path
import tierd.cli.main
from tierd.config.load import load_config
from tierd.daemon.runtime import Daemon
Daemon(load_config(Path(sys.argv[1])))
import structlog.dev
assert structlog.dev.rich is None, "structlog loaded rich"
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] != 'tierd')))
"""

#: Library modules a daemon with POSIX tiers only imports: 775 at e9ae251 (with the dev
#: extra: rich, pygments, attrs, pydantic.v1), 752 once those were left out, 768 once the peer
#: upload route's connection tracking (``tierd.api.rawbody``) imported uvicorn's h11 protocol at
#: build (16 modules the server loaded at start anyway).
MOST_POSIX_LIBRARY_MODULES = 770


def _library_modules(code: str, *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    modules: list[str] = json.loads(done.stdout.splitlines()[-1])  # after any log line
    return modules


def test_a_posix_only_daemon_loads_no_object_store_nor_what_it_never_uses(tmp_path: Path) -> None:
    """Imports the whole daemon in a fresh interpreter (2-7 s of CPU on CI): what it checks."""
    config = tmp_path / "tierd.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "catalog": {"url": f"sqlite:///{tmp_path / 'catalog.db'}"},
                "tiers": [
                    {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
                    {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
                ],
            }
        )
    )
    modules = _library_modules(POSIX_DAEMON, str(config))  # the CLI first, as ``tierd run``
    loaded = set(modules)
    assert [m for m in (*LAZY, *NEVER, "google", "azure") if m in loaded] == []
    tops = sorted({m.split(".")[0] for m in modules})
    assert len(modules) <= MOST_POSIX_LIBRARY_MODULES, f"{len(modules)} modules: {tops}"


def test_the_daemon_imports_no_s3_postgresql_or_alembic_until_used() -> None:
    """The daemon's modules first, then the CLI's: nothing hidden is loaded in this order either."""
    code = (
        "import json, sys; import tierd.daemon.runtime, tierd.cli.main;"
        f"print(json.dumps([m for m in {(*LAZY, *NEVER)!r} if m in sys.modules]))"
    )
    assert _library_modules(code) == []


def test_the_command_line_parser_loads_no_http_client_nor_completion() -> None:
    code = (
        "import json, sys; import tierd.cli.main; tierd.cli.main.parser();"
        f"print(json.dumps([m for m in {CLI_COMMANDS_ONLY!r} if m in sys.modules]))"
    )
    assert _library_modules(code) == []


def test_httpx_loads_without_its_command_line_once_tierd_logs_is_imported() -> None:
    """Whenever httpx is imported (a peer or GCS tier, the CLI), not its click, rich and pygments."""
    unwanted = ("click", *NEVER)
    code = "import json, sys; import tierd.logs, httpx;" + (
        f"print(json.dumps([m for m in {unwanted!r} if m in sys.modules]))"
    )
    assert _library_modules(code) == []


def test_an_s3_tier_loads_the_s3_stack() -> None:
    code = (
        "import sys; from tierd.config import S3Tier; from tierd.daemon.backends import make_backend;"
        "make_backend(S3Tier(name='s3', kind='s3', bucket='bench', endpoint_url='http://127.0.0.1:9'));"
        "print('aioboto3' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"


#: Modules other than tierd's own that a daemon with an S3 tier imports: 1,159 at fc4fd90 with
#: the dev extra installed (structlog loads rich and pygments when they are there), 1,083
#: without it; 1,197 at e9ae251, 1,098 once rich, pygments and pydantic.v1 were left out.
#: Each one costs resident memory in every daemon (~90 MB of the daemon's 131 MB at ready
#: are its imports): a regrowth past this fails, to be looked at, not just raised.
#: 1,114 with uvicorn's h11 protocol imported at build (rawbody), 1,076 once the client's
#: session left out aioboto3's transfer methods (``NO_TRANSFER_METHODS``).
MOST_LIBRARY_MODULES = 1_085

#: What aioboto3 injects into every S3 client class (``upload_file``, ``copy``, ...) imports;
#: tierd builds clients only (``s3.client.ClientSession``).
NO_TRANSFER_METHODS = ("s3transfer", "aiofiles", "boto3.s3.transfer", "boto3.crt")


def test_the_daemons_import_set_does_not_regrow() -> None:
    """Counted once the tier's client is open: building it imported more (aioboto3's S3
    transfer methods: 1,159 modules before, 1,197 after, at 54589cf with the dev extra)."""
    code = (
        "import asyncio, json, sys; import tierd.daemon.runtime, tierd.cli.main;"
        "from tierd.config import S3Tier; from tierd.daemon.backends import make_backend;"
        "b = make_backend(S3Tier(name='s3', kind='s3', bucket='bench', endpoint_url='http://127.0.0.1:9'));"
        "asyncio.run(b.client());"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] != 'tierd')))"
    )
    modules = _library_modules(code)
    assert [m for m in NO_TRANSFER_METHODS if m in modules] == []
    tops = sorted({m.split(".")[0] for m in modules})
    assert len(modules) <= MOST_LIBRARY_MODULES, f"{len(modules)} modules: {tops}"
