"""Detection records each file's and directory's owner, group and mode at first sight (both catalogs)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.detect.helpers import NothingKnown, make_spec
from tests.unit.detect.layouts import LAYOUTS
from tierd.config import Config
from tierd.daemon.catalog.checkpoints import files_of
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.ownership import RecordedDirectory, directories_of
from tierd.daemon.context import Context
from tierd.daemon.detect.owners import DirectoryStat, directories_holding, stat_directories
from tierd.daemon.detect.record import Outcome, record_checkpoint
from tierd.daemon.detect.scan import scan_root

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
JOB = 1234


@pytest.fixture
def ctx(db: Database, make_config: Callable[..., Config]) -> Context:
    return Context(config=make_config(), db=db)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another owner needs root")
async def test_a_step_records_its_files_and_directories_owner_group_and_mode(ctx: Context) -> None:
    watch = ctx.config.watch[0]
    DCP.uncommitted(watch.path, 3)
    DCP.commit(watch.path, 3)
    step = watch.path / "step_3"
    for path in step.iterdir():
        os.chown(path, JOB, JOB + 1)
        os.chmod(path, 0o600 if path.name == ".metadata" else 0o640)
    os.chown(step, JOB, JOB + 1)
    os.chmod(step, 0o750)
    os.chown(watch.path, JOB, JOB)
    os.chmod(watch.path, 0o2770)  # a shared run directory: setgid recorded as it is
    spec = make_spec(watch.path, ctx.config.tier0.path)
    (found,) = [f for f in scan_root(spec, NothingKnown()) if f.step == 3]

    outcome, checkpoint_id = await record_checkpoint(
        ctx,
        found.verdict,
        run="demo",
        step=3,
        fmt="dcp",
        relpath=found.relpath,
        actor="detector:dcp",
        action="detected",
    )

    assert outcome is Outcome.CREATED
    with ctx.db.read_session() as session:
        files = files_of(session, checkpoint_id)
        directories = directories_of(session, checkpoint_id)
    assert len(files) == len(list(step.iterdir())) > 1
    for f in files:
        mode = 0o600 if f.relpath.endswith("/.metadata") else 0o640
        assert (f.relpath, f.uid, f.gid, f.mode) == (f.relpath, JOB, JOB + 1, mode)
    assert directories == [
        RecordedDirectory("demo", JOB, JOB, 0o2770),
        RecordedDirectory("demo/step_3", JOB, JOB + 1, 0o750),
    ]


def test_every_directory_on_the_way_is_listed_parents_first() -> None:
    files = ["r/s/b/c/x", "r/s/a", "r/s-x/y", "r/s/b/z", "top"]
    assert directories_holding(files) == ["r", "r/s", "r/s/b", "r/s/b/c", "r/s-x"]


def test_directories_are_stated_from_the_root_and_a_symlink_on_the_way_fails(tmp_path: Path) -> None:
    (tmp_path / "r" / "s" / "b").mkdir(parents=True)
    (tmp_path / "r" / "s-x").mkdir()
    os.chmod(tmp_path / "r" / "s" / "b", 0o710)
    found = stat_directories(tmp_path, ["r/s/b/f", "r/s-x/g"])
    me = (os.geteuid(), os.getegid())
    modes = {d.relpath: d.mode for d in found}
    assert [d.relpath for d in found] == ["r", "r/s", "r/s/b", "r/s-x"]
    assert all((d.uid, d.gid) == me for d in found)
    assert modes["r/s/b"] == 0o710
    assert modes["r"] == stat.S_IMODE(os.stat(tmp_path / "r").st_mode)
    assert found[0] == DirectoryStat("r", *me, modes["r"])

    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "r" / "s-x").rmdir()
    (tmp_path / "r" / "s-x").symlink_to(outside)
    with pytest.raises(NotADirectoryError):  # O_NOFOLLOW | O_DIRECTORY on a symlink
        stat_directories(tmp_path, ["r/s-x/g"])
