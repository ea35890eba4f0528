"""Record a benchmark checkpoint in a fresh SQLite catalog with whichever tierd is on the path.

Run as ``python -P bench/record_catalog.py`` with ``PYTHONPATH=<tree>`` (``bench.sides``),
so that the catalog of each side of a comparison is migrated and written by that side's own
tierd (its schema, its ``write_complete``), as detection there would write it. It imports
only tierd and the standard library, through names that stayed put across the commits it is
meant for (``detect.record``, ``catalog.db``, ``catalog.migrate``, ``catalog.replicas``).

Reads one JSON object on stdin: ``catalog`` (a file path), ``config`` (the daemon's config
as a dict), ``detection`` (``Detection``'s fields but the files), ``files`` (``HashedFile``'s
fields each; fields this tree does not know are dropped) and optionally ``only_on``
(``{"tier", "location", "deleted": [tiers]}``: that replica marked verified, those deleted).
Prints ``{"checkpoint_id": N}``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any


def record(spec: dict[str, Any]) -> int:
    """Migrate the catalog, record the checkpoint, apply ``only_on``; its id."""
    from tierd.config import Config
    from tierd.daemon.catalog.db import Database
    from tierd.daemon.catalog.migrate import upgrade
    from tierd.daemon.detect import record as detect_record

    hashed = detect_record.HashedFile  # type: ignore[attr-defined]  # defined there in older trees
    known = {f.name for f in dataclasses.fields(hashed)}
    files = tuple(hashed(**{k: v for k, v in f.items() if k in known}) for f in spec["files"])
    config = Config(**{**spec["config"], "catalog": {"url": f"sqlite:///{spec['catalog']}"}})
    db = Database(config.catalog.url)
    try:
        upgrade(db)
        _, checkpoint_id = detect_record.write_complete(
            db, config, detect_record.Detection(**spec["detection"], files=files)
        )
        if spec.get("only_on"):
            _only_on(db, checkpoint_id, spec["only_on"], sum(f.size for f in files))
    finally:
        db.dispose()
    return int(checkpoint_id)


def _only_on(db: Any, checkpoint_id: int, only_on: dict[str, Any], total_bytes: int) -> None:
    """Mark the checkpoint verified on ``only_on["tier"]`` and deleted on ``only_on["deleted"]``."""
    from tierd.daemon.catalog.replicas import find_replica, mark_replica_deleted, mark_replica_verified

    with db.session() as session:
        for tier in only_on.get("deleted", []):
            deleted = find_replica(session, checkpoint_id, tier)
            assert deleted is not None, tier
            mark_replica_deleted(deleted)
        replica = find_replica(session, checkpoint_id, only_on["tier"])
        assert replica is not None, only_on["tier"]
        mark_replica_verified(replica, only_on["location"], total_bytes)


if __name__ == "__main__":
    print(json.dumps({"checkpoint_id": record(json.load(sys.stdin))}))
