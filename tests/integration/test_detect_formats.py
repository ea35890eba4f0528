"""Every format end to end on SQLite and PostgreSQL: scan, hash, record, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.unit.detect.layouts import LAYOUTS, Layout, crc64_b64
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, File
from tierd.daemon.context import Context
from tierd.daemon.detect.service import DetectService


def _watch(layout: Layout, path: Any) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"path": str(path), "run": "demo", "format": "auto"}
    if layout.marker:
        entry["marker"] = layout.marker
    return [entry]


def _rows(db: Database) -> list[Checkpoint]:
    with db.read_session() as session:
        rows = session.scalars(select(Checkpoint).order_by(Checkpoint.step)).all()
        for row in rows:
            _ = row.files, row.replicas, row.run
        return list(rows)


@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
async def test_format_recorded_once_with_checksums(
    layout: Layout, db: Database, make_config: Callable[..., Config], tmp_path: Any
) -> None:
    root = tmp_path / "nvme" / "demo"
    config = make_config(watch=_watch(layout, root))
    ctx = Context(config=config, db=db)
    svc = DetectService(ctx)

    layout.partial(root, 12)
    await svc.reconcile()
    assert _rows(db) == [], "a half-written step was recorded"
    layout.uncommitted(root, 12)
    await svc.reconcile()
    assert _rows(db) == [], "a crash between data and commit left a recorded step"
    layout.commit(root, 12)
    await svc.reconcile()
    await svc.reconcile()
    await DetectService(ctx).reconcile()  # a restarted daemon (fresh memory) adds nothing

    (row,) = _rows(db)
    assert (row.run.name, row.step, row.format, row.state) == ("demo", 12, layout.name, "complete")
    tier0 = config.tier0.path.resolve()
    assert row.path == layout.path(root, 12).relative_to(tier0).as_posix()
    expected = {p.relative_to(tier0).as_posix(): crc64_b64(p) for p in layout.files(root, 12)}
    assert {f.relpath: f.checksum for f in row.files} == expected
    assert [r.state for r in row.replicas] == ["verified", "pending", "pending", "pending"]
    with db.read_session() as session:
        assert session.scalar(select(func.count()).select_from(File)) == len(expected)
