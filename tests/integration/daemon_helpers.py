"""Helpers for pipeline integration tests: checkpoints on disk and in the catalog, the daemon
as a real subprocess, and polling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from sqlalchemy import select

from tests.fixtures.net import free_port
from tierd.config import Config, PosixTier, S3Tier
from tierd.daemon import checksum
from tierd.daemon.catalog.audit import list_events
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    AuditEvent,
    Checkpoint,
    File,
    Job,
    JobFileDone,
    Replica,
    ReplicaState,
    Run,
    Upload,
    utcnow,
)
from tierd.daemon.catalog.replicas import replicas_by_tier

T = TypeVar("T")
MiB = 1024 * 1024


def write_files(root: Path, sizes: Mapping[str, int], *, seed: int = 0) -> dict[str, bytes]:
    """Files of pseudo-random bytes under ``root``; the last name is written last (a marker)."""
    out: dict[str, bytes] = {}
    for i, (name, size) in enumerate(sizes.items()):
        data = _random_bytes(size, seed * 1000 + i)
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(i * 1_000_000_000 + 1, i * 1_000_000_000 + 1))  # strictly increasing mtimes
        out[name] = data
    return out


def _random_bytes(size: int, seed: int) -> bytes:
    block = seed.to_bytes(8, "big") + os.urandom(4088)  # distinct per file, cheap to make
    return (block * (size // len(block) + 1))[:size] if size else b""


def record_checkpoint(db: Database, config: Config, run: str, step: int, path: str, *, node: str = "") -> int:
    """Record the files under ``<tier0>/<path>`` as a complete checkpoint, as detection would."""
    root = config.tier0.path
    with db.session() as s:
        run_row = s.scalars(select(Run).where(Run.name == run)).one_or_none() or Run(name=run)
        ckpt = Checkpoint(run=run_row, step=step, path=path, format="dcp", node=node, created_at=utcnow())
        for file in sorted((root / path).rglob("*")):
            if file.is_file():
                size, crc = checksum.hash_file(file)
                rel = str(file.relative_to(root))
                st = file.stat()
                ckpt.files.append(
                    File(
                        relpath=rel,
                        size=size,
                        mtime_ns=st.st_mtime_ns,
                        checksum_algo="crc64nvme",
                        checksum=crc,
                    )
                )
        ckpt.total_bytes = sum(f.size for f in ckpt.files)
        ckpt.file_count = len(ckpt.files)
        ckpt.completed_at = utcnow()
        for index, tier in enumerate(config.tiers):
            state = ReplicaState.VERIFIED if index == 0 else ReplicaState.PENDING
            ckpt.replicas.append(Replica(tier=tier.name, tier_index=index, state=state.value))
        s.add(ckpt)
        s.flush()
        return ckpt.id


def replicas(db: Database, checkpoint_id: int) -> dict[str, Replica]:
    with db.read_session() as s:
        return replicas_by_tier(s, checkpoint_id)


def states(db: Database, checkpoint_id: int) -> dict[str, str]:
    return {tier: r.state for tier, r in replicas(db, checkpoint_id).items()}


def all_jobs(db: Database) -> list[Job]:
    with db.read_session() as s:
        return list(s.scalars(select(Job).order_by(Job.id)))


def done_files(db: Database, job_id: int) -> set[str]:
    """The files a job has recorded as finished."""
    query = select(File.relpath).join(JobFileDone, JobFileDone.file_id == File.id)
    with db.read_session() as s:
        return set(s.scalars(query.where(JobFileDone.job_id == job_id)))


def audit(db: Database) -> list[AuditEvent]:
    with db.read_session() as s:
        return list_events(s)


def uploads(db: Database) -> list[tuple[str, str, str, list[int]]]:
    """(tier, relpath, upload id, finished part numbers) of every recorded upload."""
    with db.read_session() as s:
        return [
            (u.tier, u.relpath, u.upload_id, [p.part_number for p in u.parts])
            for u in s.scalars(select(Upload))
        ]


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll until ``predicate()`` is truthy; returns its value or fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def tier_dict(tier: PosixTier | S3Tier) -> dict[str, Any]:
    """A tier as config-file YAML, secrets included."""
    data = tier.model_dump(mode="json", exclude_none=True)
    if isinstance(tier, S3Tier) and tier.secret_access_key is not None:
        data["secret_access_key"] = tier.secret_access_key.get_secret_value()
    data.pop("retention", None)
    return data


def config_dict(root: Path, tiers: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    """A daemon config over ``root`` (SQLite catalog, JSON logs, free API port, no watch)."""
    data: dict[str, Any] = {
        "node": "testnode",
        "catalog": {"url": f"sqlite:///{root / 'catalog.db'}"},
        "api": {"listen": f"127.0.0.1:{free_port()}"},
        "drain_timeout_seconds": 10,
        "log": {"level": "info", "format": "json"},
        "tiers": tiers,
    }
    data.update(overrides)
    return data


@dataclass
class DaemonProcess:
    """``python -m tierd run`` as a subprocess, its JSON log lines kept in a file."""

    config_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0
    _offsets: list[int] = field(default_factory=list)

    @classmethod
    def prepare(cls, root: Path, data: dict[str, Any]) -> DaemonProcess:
        """Write the config and migrate the catalog (``tierd db upgrade``)."""
        path = root / "tierd.yaml"
        path.write_text(yaml.safe_dump(data))
        done = subprocess.run(
            [sys.executable, "-m", "tierd", "db", "upgrade", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return cls(path, root / "daemon.log")

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        self._offsets.append(self.log_path.stat().st_size if self.log_path.exists() else 0)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tierd", "run", "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.runs += 1

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def events(self, run: int | None = None) -> list[dict[str, Any]]:
        """The JSON log events of every run, or of run number ``run`` (1-based)."""
        text = self.log_path.read_bytes() if self.log_path.exists() else b""
        if run is not None:
            end = self._offsets[run] if run < len(self._offsets) else len(text)
            text = text[self._offsets[run - 1] : end]
        out = []
        for line in text.decode(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""
