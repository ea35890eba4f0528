"""The store-hold pass over a real catalog and an S3 tier with Object Lock on moto's server."""

from __future__ import annotations

import secrets
from pathlib import Path

from structlog.testing import capture_logs

from tests.fixtures.s3servers import S3Server
from tests.fixtures.world import World, posix_tier
from tierd.daemon.backends import close_backends
from tierd.daemon.catalog import protection
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.retention.store_holds import StoreHolds

ON_BOTH = {"nvme": "verified", "s3": "verified"}


def hold(db: Database, checkpoint_id: int) -> None:
    with db.session() as s:
        protection.add_hold(s, checkpoint_id, name="case", reason="litigation", actor="admin")


async def test_a_replica_the_store_refuses_is_logged_and_the_others_are_held(
    tmp_path: Path, sqlite_db: Database, moto_server: S3Server
) -> None:
    bucket = f"tierd-lock-{secrets.token_hex(6)}"
    moto_server.client().create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    tier = moto_server.new_tier("s3", bucket=bucket, object_lock=True)
    w = World.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme"), tier])
    try:
        gone, kept = [await w.add(step, on=ON_BOTH, files=1) for step in (1, 2)]
        for key in [k["Key"] for k in moto_server.client().list_objects_v2(Bucket=bucket)["Contents"]]:
            if "/step00001/" in key:
                moto_server.client().delete_object(Bucket=bucket, Key=key)  # a delete marker on top
        hold(w.db, gone)
        hold(w.db, kept)
        holds = StoreHolds(Context(config=w.config, db=w.db), w.backends, interval=60)
        await w.backends["s3"].check_legal_hold()
        with capture_logs() as logs:
            assert not await holds.run_pass()
        assert w.replica(kept, "s3").store_hold is True
        assert w.replica(gone, "s3").store_hold is None  # tried again at the next pass
        failed = [e for e in logs if e["event"] == "store_hold_failed"]
        assert [(e["checkpoint"], e["tier"], e["legal_hold"]) for e in failed] == [(gone, "s3", "ON")]
        assert await holds.run_pass() is False  # nothing more for the one held; the other fails again
        assert w.replica(kept, "s3").store_hold is True
    finally:
        await close_backends(w.backends)
