"""``check_tier0``: the look at tier 0 before tierd says a checkpoint is here (SQLite and PostgreSQL)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import posix_config_dict
from tests.fixtures.opens import OpenSpy
from tests.integration.daemon_helpers import audit, record_checkpoint, write_files
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.detect.presence import check_tier0

FILES = {"__0_0.distcp": 4096, ".metadata": 64}


def _config(tmp_path: Path, db: Database) -> Config:
    return Config(**posix_config_dict(tmp_path, catalog={"url": db.url}, node="n1"))


def _step(db: Database, config: Config, step: int) -> tuple[int, Path]:
    path = config.tier0.path / "demo" / f"step_{step}"
    write_files(path, FILES, seed=step)
    return record_checkpoint(db, config, "demo", step, f"demo/step_{step}", node="n1"), path


def _actions(db: Database, checkpoint_id: int) -> list[str]:
    return [e.action for e in audit(db) if e.checkpoint_id == checkpoint_id]


def test_a_step_whose_path_is_gone_is_not_here_and_its_tier0_replica_deleted(
    tmp_path: Path, db: Database
) -> None:
    config = _config(tmp_path, db)
    checkpoint_id, path = _step(db, config, 1)
    here = check_tier0(db, config, checkpoint_id, actor="test")
    assert (here.here, here.state, here.missing) == (True, "verified", ())
    shutil.rmtree(path)
    gone = check_tier0(db, config, checkpoint_id, actor="test")
    assert (gone.here, gone.state, len(gone.missing)) == (False, "deleted", 2)
    assert _actions(db, checkpoint_id) == ["vanished"]
    again = check_tier0(db, config, checkpoint_id, actor="test")
    assert (again.here, again.state, again.reason) == (False, "deleted", "tier 0's replica is deleted")
    assert _actions(db, checkpoint_id) == ["vanished"]  # said once


def test_a_file_swapped_for_a_symlink_is_missing_and_nothing_outside_is_opened(
    tmp_path: Path, db: Database
) -> None:
    config = _config(tmp_path, db)
    checkpoint_id, path = _step(db, config, 2)
    outside = tmp_path / "secret"
    outside.write_bytes(b"s" * FILES["__0_0.distcp"])  # the recorded size: only the type tells
    (path / "__0_0.distcp").unlink()
    (path / "__0_0.distcp").symlink_to(outside)
    spy = OpenSpy(outside)
    try:
        found = check_tier0(db, config, checkpoint_id, actor="test")
        assert spy.opened() == set()
    finally:
        spy.close()
    assert (found.here, found.state, found.missing) == (False, "failed", ("demo/step_2/__0_0.distcp",))
    assert _actions(db, checkpoint_id) == ["replica_mismatch", "reverify_failed"]
