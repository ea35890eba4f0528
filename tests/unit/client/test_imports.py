"""``import tierd.client`` costs a training job nothing of the daemon's side."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_SIDE = ("tierd.daemon", "tierd.api", "fastapi", "sqlalchemy", "aioboto3", "watchdog", "uvicorn")


def _loaded() -> list[str]:
    """The modules a fresh interpreter holds after ``import tierd.client``."""
    code = "import json, sys, tierd.client; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_importing_the_client_loads_nothing_of_the_daemon() -> None:
    loaded = _loaded()
    assert "httpx" in loaded
    assert [m for m in loaded if m.startswith(SERVER_SIDE)] == []


def test_of_tierd_the_client_loads_only_itself_and_the_errors() -> None:
    loaded = _loaded()
    tierd = [m for m in loaded if m.split(".")[0] == "tierd"]
    assert [m for m in tierd if m not in ("tierd", "tierd.errors") and not m.startswith("tierd.client")] == []
    assert [m for m in loaded if m.split(".")[0] in ("pydantic", "yaml", "structlog")] == []
