"""/metrics over HTTP: build info, catalog gauges and detection counters."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Replica, Run
from tierd.daemon.context import Context
from tierd.daemon.metrics.build import revision


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_report_the_catalog(sqlite_db: Database, make_config: Callable[..., Config]) -> None:
    created = datetime.now(UTC) - timedelta(minutes=10)
    with sqlite_db.session() as s:
        ckpt = Checkpoint(
            run=Run(name="demo"), step=1, path="demo/1", format="dcp", created_at=created, total_bytes=42
        )
        ckpt.replicas.append(Replica(tier="nvme", tier_index=0, state="verified"))
        ckpt.replicas.append(Replica(tier="pfs", tier_index=1, state="copying"))
        s.add(ckpt)
    ctx = Context(config=make_config(), db=sqlite_db, watcher_running=True)
    ctx.metrics.detected.labels("dcp").inc()
    service = ApiService(create_app(ctx), "127.0.0.1", 0)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.port}") as http:
            response = await http.get("/metrics")
    finally:
        await service.stop(5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = _samples(response.text)
    assert samples[("tierd_build_info", (("revision", revision()), ("version", "0.1.0")))] == 1
    assert samples[("tierd_catalog_up", ())] == 1
    assert samples[("tierd_replicas", (("state", "verified"), ("tier", "nvme")))] == 1
    assert samples[("tierd_replicas", (("state", "copying"), ("tier", "pfs")))] == 1
    assert samples[("tierd_replicas", (("state", "verified"), ("tier", "pfs")))] == 0
    assert samples[("tierd_verified_bytes", (("tier", "nvme"),))] == 42
    age = samples[("tierd_recovery_point_age_seconds", (("tier", "nvme"),))]
    assert 590 < age < 3600
    assert ("tierd_recovery_point_age_seconds", (("tier", "pfs"),)) not in samples
    assert ("tierd_node_loss_recovery_point_age_seconds", ()) not in samples  # on nvme alone
    assert samples[("tierd_checkpoints_detected_total", (("format", "dcp"),))] == 1
