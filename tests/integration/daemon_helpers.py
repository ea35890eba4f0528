"""Helpers for pipeline integration tests: checkpoints on disk and in the catalog, daemon
configs, and polling (the daemon itself is ``tests.fixtures.daemon.Daemon``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select

from tests.fixtures.net import free_port
from tests.fixtures.world import FileRow, ReplicaRow, record
from tierd.config import Config, GcsTier, PosixTier, S3Tier
from tierd.daemon import checksum
from tierd.daemon.catalog.audit import list_events
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    AuditEvent,
    File,
    Job,
    JobFileDone,
    Replica,
    ReplicaState,
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
    files = []
    for file in sorted((root / path).rglob("*")):
        if file.is_file():
            size, crc = checksum.hash_file(file)
            files.append(FileRow(str(file.relative_to(root)), size, crc, file.stat().st_mtime_ns))
    copies = [
        ReplicaRow(tier.name, index, (ReplicaState.VERIFIED if index == 0 else ReplicaState.PENDING).value)
        for index, tier in enumerate(config.tiers)
    ]
    now = utcnow()
    return record(
        db,
        run=run,
        step=step,
        path=path,
        files=files,
        replicas=copies,
        node=node,
        created_at=now,
        completed_at=now,
    )


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


def tier_dict(tier: PosixTier | S3Tier | GcsTier) -> dict[str, Any]:
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
