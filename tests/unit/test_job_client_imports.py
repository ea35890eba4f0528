"""``import tierd.client`` costs a training job nothing of the daemon's side."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_SIDE = ("tierd.daemon", "tierd.api", "fastapi", "sqlalchemy", "aioboto3", "watchdog", "uvicorn")


def test_importing_the_client_loads_nothing_of_the_daemon() -> None:
    code = "import json, sys, tierd.client; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "httpx" in loaded
    assert [m for m in loaded if m.startswith(SERVER_SIDE)] == []
