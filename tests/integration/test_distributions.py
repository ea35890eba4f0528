"""The two distributions built from the one ``tierd/`` tree, as pip builds and installs them.

``tierd-client`` (``client/pyproject.toml``) is what a training image installs: its wheel,
installed into a fresh venv, pulls in httpx's few packages and nothing of the daemon, and there
``from tierd.client import Client`` works while ``import tierd.daemon`` fails. ``tierd`` (the
repository's ``pyproject.toml``) ships the rest and depends on the client at the same version:
the two wheels hold every file of ``tierd/`` once.

The fresh venv installs with ``--no-index`` from a cache of the client's dependencies, the
versions in constraints.txt, downloaded once per machine (``/var/cache/tierd-tests``, keyed by
their content); it needs the network only to fill that cache. Building the two wheels with pip
and installing takes 5-15 s: the wheels are built once for the module.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

import pytest

import tierd

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributions")]

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path("/var/cache/tierd-tests")
#: What ``pip install tierd-client`` puts in a fresh venv: the client and httpx with its own.
CLIENT_PULLS_IN = {
    "tierd-client",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "idna",
    "certifi",
    "typing-extensions",
}
MiB = 1024 * 1024


@dataclass(frozen=True)
class Wheel:
    """A built wheel: its path, file names and metadata."""

    path: Path

    @property
    def files(self) -> set[str]:
        with zipfile.ZipFile(self.path) as archive:
            return {n for n in archive.namelist() if ".dist-info/" not in n}

    @property
    def metadata(self) -> list[tuple[str, str]]:
        with zipfile.ZipFile(self.path) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            return list(HeaderParser().parsestr(archive.read(name).decode()).items())

    def field(self, key: str) -> list[str]:
        return [value for name, value in self.metadata if name == key]


def _quiet_env() -> dict[str, str]:
    """This environment without the worktree on the path (the venv must import only what it installed)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _pip(*argv: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_quiet_env(),
        timeout=600,
    )
    assert done.returncode == 0, f"pip {' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Wheel]:
    """Both wheels, built by pip from this tree (hatchling from the dev extra, no build isolation)."""
    out = tmp_path_factory.mktemp("wheels")
    _pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "./client", ".")
    return {
        name: Wheel(next(out.glob(f"{name.replace('-', '_')}-*.whl"))) for name in ("tierd", "tierd-client")
    }


def _dependency_wheels() -> Path:
    """The client's dependencies as wheels, at constraints.txt's versions: downloaded once per machine."""
    requires = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]["dependencies"]
    constraints = (ROOT / "constraints.txt").read_text()
    key = hashlib.sha256(json.dumps([requires, constraints]).encode()).hexdigest()[:16]
    cache = CACHE / f"client-dependencies-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(f"{cache}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache.exists():
            made = Path(tempfile.mkdtemp(prefix=f"{cache.name}-", dir=CACHE))
            _pip(
                "download",
                "-q",
                "--only-binary=:all:",
                "-c",
                str(ROOT / "constraints.txt"),
                "-d",
                str(made),
                *requires,
            )
            made.rename(cache)
    return cache


@pytest.fixture(scope="module")
def client_venv(wheels: dict[str, Wheel], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv (no pip of its own) with ``pip install tierd-client`` done, offline."""
    venv = tmp_path_factory.mktemp("client-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    found = [
        "--find-links",
        str(wheels["tierd-client"].path.parent),
        "--find-links",
        str(_dependency_wheels()),
    ]
    _pip("--python", str(python), "install", "-q", "--no-index", *found, "tierd-client", cwd=venv)
    yield python
    shutil.rmtree(venv, ignore_errors=True)


def _run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        cwd=python.parent,
        env=_quiet_env(),
        timeout=60,
    )


def _installed(python: Path) -> dict[str, int]:
    """Each distribution in the venv and the bytes of its files."""
    code = (
        "import json, importlib.metadata as m\n"
        "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): "
        "sum(f.size or 0 for f in d.files or ()) for d in m.distributions()}))"
    )
    done = _run(python, code)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_the_client_pulls_in_httpx_alone(client_venv: Path, wheels: dict[str, Wheel]) -> None:
    installed = _installed(client_venv)
    size = sum(installed.values())
    print(f"pip install tierd-client: {len(installed)} packages, {size / MiB:.1f} MiB: {sorted(installed)}")
    assert set(installed) == CLIENT_PULLS_IN
    assert size < 10 * MiB
    daemon_requires = {
        r.split("==")[0].split(">=")[0].split("[")[0].strip() for r in wheels["tierd"].field("Requires-Dist")
    }
    assert set(installed) & daemon_requires == {"tierd-client", "httpx"}


def test_the_client_imports_and_the_daemon_is_not_there(client_venv: Path) -> None:
    done = _run(
        client_venv, "import tierd; from tierd.client import Client, AsyncClient; print(tierd.__version__)"
    )
    assert (done.returncode, done.stdout.strip()) == (0, tierd.__version__), done.stderr
    assert _run(client_venv, "import tierd.errors, tierd.integrations").returncode == 0
    for module, missing in (
        ("tierd.daemon", "tierd.daemon"),
        ("tierd.cli.main", "tierd.cli"),
        ("tierd.config", "tierd.config"),
    ):
        done = _run(client_venv, f"import {module}")
        assert f"ModuleNotFoundError: No module named '{missing}'" in done.stderr
    done = _run(client_venv, "import tierd.integrations.dcp")  # its library is the [dcp] extra
    assert "ModuleNotFoundError: No module named 'torch'" in done.stderr


def test_the_two_wheels_hold_each_file_of_the_tree_once(wheels: dict[str, Wheel]) -> None:
    client, daemon = wheels["tierd-client"].files, wheels["tierd"].files
    tree = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "tierd").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert client & daemon == set()
    assert client | daemon == tree
    assert {"tierd/__init__.py", "tierd/errors.py", "tierd/py.typed", "tierd/client/__init__.py"} <= client
    assert "tierd/migrations/script.py.mako" in daemon


def test_both_are_this_version_and_the_daemon_needs_its_client(wheels: dict[str, Wheel]) -> None:
    assert wheels["tierd"].field("Version") == wheels["tierd-client"].field("Version") == [tierd.__version__]
    assert f"tierd-client=={tierd.__version__}" in wheels["tierd"].field("Requires-Dist")
    assert wheels["tierd-client"].field("Requires-Dist")[0] == "httpx>=0.27"
    assert set(wheels["tierd-client"].field("Provides-Extra")) == {"dcp", "lightning", "hf"}
