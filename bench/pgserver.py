"""A PostgreSQL server for a benchmark, started with initdb/pg_ctl on 127.0.0.1 as the test
suite's fixture (``tests/fixtures/postgres.py``) starts it, but durable (``fsync`` on): the
catalog a daemon runs on. That fixture is a pytest fixture (it skips when PostgreSQL is
missing), so the few lines it takes are repeated here.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.net import free_port

__all__ = ["PostgresServer", "pg_available", "postgres_server"]

HOST = "127.0.0.1"


def _pg_bin(name: str) -> str | None:
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)


def pg_available() -> bool:
    """Whether initdb and pg_ctl are installed."""
    return _pg_bin("initdb") is not None and _pg_bin("pg_ctl") is not None


def _as_user() -> tuple[list[str], str]:
    """PostgreSQL refuses to run as root: drop to the ``postgres`` (or ``nobody``) user."""
    if os.geteuid() != 0:
        return [], pwd.getpwuid(os.geteuid()).pw_name
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], name
    raise RuntimeError("running as root and no unprivileged user exists for PostgreSQL")


def _tool(name: str) -> str:
    found = _pg_bin(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed")
    return found


@dataclass(frozen=True)
class PostgresServer:
    """A running server: make and drop databases, copy one from a template."""

    port: int
    user: str
    prefix: tuple[str, ...]
    version: str

    def url(self, name: str) -> str:
        """The SQLAlchemy URL of database ``name``."""
        return f"postgresql+psycopg://{self.user}@{HOST}:{self.port}/{name}"

    def create(self, name: str, *, template: str | None = None) -> str:
        """A new database (a copy of ``template``, which must have no open connection); its URL."""
        copy = ["-T", template] if template else []
        self._run("createdb", *copy, name)
        return self.url(name)

    def drop(self, name: str) -> None:
        """Drop database ``name`` if it exists."""
        self._run("dropdb", "--if-exists", name)

    def _run(self, tool: str, *args: str) -> None:
        argv = [*self.prefix, _tool(tool), "-h", HOST, "-p", str(self.port), "-U", self.user, *args]
        subprocess.run(argv, check=True, capture_output=True)


@contextmanager
def postgres_server(parent: Path | None = None) -> Iterator[PostgresServer]:
    """Start PostgreSQL (data under ``parent``, else the temporary directory); stop it on exit."""
    prefix, user = _as_user()
    base = Path(tempfile.mkdtemp(prefix="tierd-bench-pg-", dir=parent))
    data, sock_dir = base / "data", base / "sock"
    sock_dir.mkdir()
    if prefix:
        shutil.chown(base, user)
        shutil.chown(sock_dir, user)
    port = free_port()
    subprocess.run(
        [*prefix, _tool("initdb"), "-D", str(data), "-U", user, "-A", "trust", "--no-sync", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    options = f"-h {HOST} -p {port} -k {sock_dir}"
    ctl = [*prefix, _tool("pg_ctl"), "-D", str(data)]
    start = [*ctl, "-o", options, "-w", "-l", str(base / "log"), "start"]
    subprocess.run(start, check=True, capture_output=True)
    try:
        version = subprocess.run([_tool("pg_ctl"), "--version"], capture_output=True, text=True).stdout
        yield PostgresServer(port, user, tuple(prefix), version.strip())
    finally:
        subprocess.run([*ctl, "-m", "fast", "-w", "stop"], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
