"""Context.acts_on: node-local tiers are every daemon's own; shared ones only the leader's."""

from __future__ import annotations

from pathlib import Path

from tierd.config import Config, PosixTier
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context


def test_only_the_leader_acts_on_shared_tiers(tmp_path: Path) -> None:
    config = Config(
        tiers=[
            PosixTier(name="nvme", kind="posix", path=tmp_path / "a"),
            PosixTier(name="pfs", kind="posix", path=tmp_path / "b"),
        ]
    )
    db = Database(f"sqlite:///{tmp_path / 'c.db'}")
    ctx = Context(config=config, db=db)
    assert ctx.leader is True
    assert ctx.acts_on("nvme")
    assert ctx.acts_on("pfs")
    ctx.leader = False
    assert ctx.acts_on("nvme")
    assert not ctx.acts_on("pfs")
    db.dispose()
