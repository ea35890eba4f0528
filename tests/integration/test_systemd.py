"""The hardened unit under real systemd: PID 1 in a container on a Debian 12 root.

``deploy/systemd/install.sh`` builds the venv the unit points at with the container's own
python3 (Debian 12's 3.11), as an operator would on a node; the venv is cached under
/var/cache/tierd-tests, keyed by what it is made from (install.sh, constraints.txt,
pyproject.toml, the root), and the code under test is bound over its copy of ``tierd``. The
unit and a drop-in from ``tierd systemd drop-in`` are installed, then the test checks what
systemd sees: ``systemctl start`` returns once the daemon is ready (``Type=notify``), the
daemon pings the watchdog, a job's checkpoint is copied from tier 0 to tier 1 under the
hardening (owner and mode kept), ``systemctl reload`` applies a new token in the same process,
and ``systemctl stop`` drains and exits 0.

Slow: a cold run first builds the root (3.3-4.2 min measured) and the venv (1.5-2.3 min, from
the package index); a warm one (20-30 s on the 2-core CI machine) boots the container and
starts Python in it three times over (the drop-in, the migrations, the daemon), each importing
tierd with its libraries.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import tierd
from tests.fixtures import http
from tests.fixtures.debroot import CACHE, PACKAGES, debian_rootfs, debootstrap_missing
from tests.fixtures.net import free_port
from tests.fixtures.nspawn import Bind, Booted, booted, nspawn_missing, run_once
from tests.integration.daemon_helpers import wait_for

#: The suite's 300 s per test is for a warm cache: a cold one builds the root and the venv first.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SOURCE = Path(tierd.__file__).resolve().parent.parent
VENV_SITE = "/opt/tierd/.venv/lib/python3.11/site-packages/tierd"
UNIT_DIR = "/etc/systemd/system"
#: The host's CA bundle: pip in the container trusts what pip on the host trusts.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
JOB_UID = 1000  # a training job's user: its files are not the daemon's


@pytest.fixture(scope="module")
def rootfs() -> Path:
    for missing in (nspawn_missing(), debootstrap_missing()):
        if missing is not None:
            pytest.skip(missing)
    return debian_rootfs(PACKAGES)


@pytest.fixture(scope="module")
def prefix(rootfs: Path) -> Path:
    """/opt/tierd as install.sh made it in the container: cached, built on first use."""
    made_from = [SOURCE / "deploy/systemd/install.sh", SOURCE / "constraints.txt", SOURCE / "pyproject.toml"]
    digest = hashlib.sha256(rootfs.name.encode())
    for path in made_from:
        digest.update(path.read_bytes())
    target = CACHE / f"nspawn-venv-{digest.hexdigest()[:16]}"
    with (CACHE / f"{target.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker building it: wait, then use its venv
        if not (target / ".venv" / "bin" / "tierd").exists():
            _install(rootfs, target)
    return target


def _install(rootfs: Path, target: Path) -> None:
    """Run install.sh in the container with /opt/tierd bound to a scratch directory, then keep it."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=CACHE))
    try:
        binds = [Bind(scratch, "/opt/tierd", write=True), Bind(SOURCE, "/src")]
        if CA_BUNDLE.exists():
            binds.append(Bind(CA_BUNDLE, str(CA_BUNDLE)))
        env = {"PIP_CERT": str(CA_BUNDLE), "PIP_NO_CACHE_DIR": "1"}
        env |= {k: v for k, v in os.environ.items() if k in ("PIP_INDEX_URL", "https_proxy", "HTTPS_PROXY")}
        result = run_once(rootfs, ["/src/deploy/systemd/install.sh"], binds, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _config(port: int, token: str) -> dict[str, Any]:
    return {
        "catalog": {"url": "sqlite:////var/lib/tierd/catalog.db"},
        "api": {"listen": f"127.0.0.1:{port}", "tokens": [{"name": "ops", "token": token, "role": "admin"}]},
        "log": {"format": "json"},
        "drain_timeout_seconds": 10,
        "watch": [{"path": "/srv/nvme/demo", "run": "demo", "format": "marker", "marker": "COMPLETE"}],
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": "/srv/nvme"},
            {"name": "pfs", "kind": "posix", "path": "/srv/pfs tier"},  # a space: quoted in the drop-in
        ],
    }


@pytest.fixture
def box(tmp_path: Path, rootfs: Path, prefix: Path) -> Iterator[Booted]:
    """The container booted, with tier 0, tier 1 and /etc/tierd bound from ``tmp_path``."""
    for name in ("etc", "nvme/demo", "pfs tier"):
        (tmp_path / name).mkdir(parents=True)
    binds = [
        Bind(prefix, "/opt/tierd"),
        Bind(SOURCE / "tierd", VENV_SITE),  # the code under test over the venv's copy
        Bind(SOURCE / "deploy/systemd/tierd.service", f"{UNIT_DIR}/tierd.service"),
        Bind(tmp_path / "etc", "/etc/tierd", write=True),
        Bind(tmp_path / "nvme", "/srv/nvme", write=True),
        Bind(tmp_path / "pfs tier", "/srv/pfs tier", write=True),
    ]
    machine = f"tierd-{uuid.uuid4().hex[:8]}"
    with booted(rootfs, binds, machine=machine, log=tmp_path / "nspawn.log") as container:
        yield container


def _write_config(tmp_path: Path, data: dict[str, Any]) -> None:
    new = tmp_path / "etc" / "config.yaml.new"
    new.write_text(yaml.safe_dump(data))
    new.rename(tmp_path / "etc" / "config.yaml")


def _job_step(tier0: Path, name: str) -> None:
    """A step written by a job's user: a private directory, a group-readable file, the marker last."""
    step = tier0 / "demo" / name
    step.mkdir(mode=0o700)
    (step / "model.bin").write_bytes(os.urandom(1 << 20))
    (step / "model.bin").chmod(0o640)
    os.utime(step / "model.bin", ns=(1, 1))  # older than the marker, whatever the clock's grain
    for path in (step, step / "model.bin"):
        os.chown(path, JOB_UID, JOB_UID)
    marker = step / "COMPLETE.tmp"
    marker.touch()
    os.chown(marker, JOB_UID, JOB_UID)
    marker.rename(step / "COMPLETE")


def _replicas(port: int, token: str) -> dict[str, str]:
    """tier -> state of the first checkpoint's replicas, as the API shows them."""
    headers = {"Authorization": f"Bearer {token}"}
    items = http.get(f"http://127.0.0.1:{port}/v1/checkpoints", headers=headers, timeout=10).json()["items"]
    return {r["tier"]: r["state"] for r in items[0]["replicas"]} if items else {}


def _status(port: int, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return http.get(f"http://127.0.0.1:{port}/v1/checkpoints", headers=headers, timeout=10).status_code


def _events(box: Booted) -> list[dict[str, Any]]:
    lines = box.run("journalctl", "--unit=tierd", "--output=cat", "--no-pager").stdout.splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_the_hardened_unit_under_systemd(tmp_path: Path, box: Booted) -> None:
    port = free_port()
    _write_config(tmp_path, _config(port, "first"))
    box.sh(
        f"mkdir -p {UNIT_DIR}/tierd.service.d && /opt/tierd/.venv/bin/tierd systemd drop-in"
        f" --config /etc/tierd/config.yaml > {UNIT_DIR}/tierd.service.d/paths.conf"
    )
    # The unit's 30 s watchdog made shorter, so that a ping is seen within the test (every 5 s).
    box.sh(f"printf '[Service]\\nWatchdogSec=10\\n' > {UNIT_DIR}/tierd.service.d/zz-test.conf")
    box.run("systemctl", "daemon-reload")
    box.run("systemctl", "enable", "tierd")

    box.run("systemctl", "start", "tierd")  # Type=notify: returns once the daemon said READY=1
    assert http.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
    started = box.show(
        "tierd", "MainPID", "ActiveState", "WatchdogUSec", "WatchdogTimestampMonotonic", "StatusText"
    )
    assert (started["ActiveState"], started["WatchdogUSec"]) == ("active", "10s")
    assert started["StatusText"] == f"serving on 127.0.0.1:{port}"

    _job_step(tmp_path / "nvme", "step1")
    copy = tmp_path / "pfs tier" / "demo" / "step1"
    verified = {"nvme": "verified", "pfs": "verified"}
    wait_for(lambda: _replicas(port, "first") == verified, 60, "the step copied to tier 1")
    for name, mode in (("", 0o700), ("model.bin", 0o640)):
        info = (copy / name).stat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (JOB_UID, JOB_UID, mode), name
    assert (copy / "model.bin").read_bytes() == (tmp_path / "nvme/demo/step1/model.bin").read_bytes()

    before = int(started["WatchdogTimestampMonotonic"])
    wait_for(
        lambda: int(box.show("tierd", "WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]) > before,
        30,
        "a watchdog ping",
    )

    _write_config(tmp_path, _config(port, "second"))
    box.run("systemctl", "reload", "tierd")
    wait_for(lambda: _status(port, "second") == 200, 30, "the new token")
    assert _status(port, "first") == 401
    running = box.show("tierd", "MainPID", "NRestarts", "ActiveState")
    assert running == {"MainPID": started["MainPID"], "NRestarts": "0", "ActiveState": "active"}

    box.run("systemctl", "stop", "tierd")
    stopped = box.show("tierd", "ExecMainCode", "ExecMainStatus", "Result")
    assert stopped == {"ExecMainCode": "1", "ExecMainStatus": "0", "Result": "success"}  # exited 0
    events = _events(box)
    assert [e["applied"] for e in events if e["event"] == "config_reloaded"] == [["api.tokens"]]
    assert [e for e in events if e["level"] in ("error", "critical")] == []
    assert events[-1]["event"] == "stopped"
