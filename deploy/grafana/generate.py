"""The Grafana dashboard for tierd, as code: ``python deploy/grafana/generate.py`` writes tierd.json.

Plain dictionaries in Grafana's dashboard JSON model (schema 39), no library: each panel is a
title, a unit and its PromQL queries. The committed ``tierd.json`` is this script's output
(``tests/deploy/test_grafana.py`` checks it), and every query is run against a
real Prometheus scraping a real daemon (``tests/integration/test_prometheus.py``).

The catalog-wide gauges come from the fleet's leader alone, so they are read with ``max by``;
counters and each node's own gauges are summed across the fleet. ``--check`` exits 1 when the
committed file differs from the output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).with_name("tierd.json")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
JOB = 'job=~"$job"'
NODE = 'job=~"$job", instance=~"$instance"'
RATE = "$__rate_interval"

Panel = dict[str, Any]


def query(expr: str, legend: str) -> dict[str, Any]:
    """One PromQL target with its legend."""
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ""}


def panel(title: str, kind: str, unit: str, targets: list[dict[str, Any]], **extra: Any) -> Panel:
    """A panel of ``kind`` (timeseries, stat, table) showing ``targets`` in ``unit``."""
    for ref, target in zip("ABCDEFGH", targets, strict=False):
        target["refId"] = ref
    return {
        "title": title,
        "type": kind,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": targets,
        **extra,
    }


def row(title: str) -> Panel:
    """A collapsible row heading the panels after it."""
    return {"title": title, "type": "row", "collapsed": False, "panels": []}


def overview() -> list[Panel]:
    """Is every daemon up, who leads, can they read the catalog, what runs."""
    return [
        row("Fleet"),
        panel("Daemons up", "stat", "none", [query(f"sum(up{{{JOB}}})", "up")]),
        panel(
            "Fleet nodes",
            "stat",
            "none",
            [query(f"max by (state) (tierd_fleet_nodes{{{JOB}}})", "{{state}}")],
        ),
        panel(
            "Leader",
            "stat",
            "none",
            [query(f"max by (instance) (tierd_fleet_leader{{{JOB}}}) == 1", "{{instance}}")],
            options={"textMode": "name"},
        ),
        panel(
            "Catalog readable",
            "stat",
            "bool_yes_no",
            [query(f"min by (instance) (tierd_catalog_up{{{NODE}}})", "{{instance}}")],
        ),
        panel(
            "Versions",
            "table",
            "none",
            [query(f"count by (version, revision) (tierd_build_info{{{JOB}}})", "{{version}} {{revision}}")],
        ),
    ]


def recovery() -> list[Panel]:
    """How old the newest verified checkpoint is on each tier, beside its objective."""
    return [
        row("Recovery point"),
        panel(
            "Recovery point age by tier",
            "timeseries",
            "s",
            [
                query(f"max by (tier) (tierd_recovery_point_age_seconds{{{JOB}}})", "{{tier}}"),
                query("tierd:recovery_point_objective_seconds", "{{tier}} objective"),
            ],
        ),
        panel(
            "Checkpoints pinned, held, waiting",
            "timeseries",
            "none",
            [
                query(f"max(tierd_checkpoints_pinned{{{JOB}}})", "pinned"),
                query(f"max(tierd_checkpoints_held{{{JOB}}})", "held"),
                query(f"max(tierd_checkpoints_waiting{{{JOB}}})", "waiting"),
            ],
        ),
        panel(
            "Longest wait for a step's files or parts",
            "timeseries",
            "s",
            [query(f"max(tierd_oldest_waiting_checkpoint_age_seconds{{{JOB}}})", "oldest waiting")],
        ),
    ]


def movement() -> list[Panel]:
    """Bytes moved, hops finished, how long a hop takes, and the work queued or in flight."""
    return [
        row("Copies"),
        panel(
            "Bytes written per tier",
            "timeseries",
            "Bps",
            [query(f"sum by (tier) (rate(tierd_transfer_bytes_total{{{NODE}}}[{RATE}]))", "{{tier}}")],
        ),
        panel(
            "Hops finished per tier",
            "timeseries",
            "ops",
            [
                query(
                    f"sum by (tier, result) (rate(tierd_transfers_total{{{NODE}}}[{RATE}]))",
                    "{{tier}} {{result}}",
                )
            ],
        ),
        panel(
            "Hop duration (p50, p95)",
            "timeseries",
            "s",
            [
                query(
                    f"histogram_quantile({q}, sum by (tier, le) "
                    f"(rate(tierd_transfer_seconds_bucket{{{NODE}}}[{RATE}])))",
                    f"{{{{tier}}}} p{int(q * 100)}",
                )
                for q in (0.5, 0.95)
            ],
        ),
        panel(
            "Jobs queued and running",
            "timeseries",
            "none",
            [query(f"max by (kind, state, tier) (tierd_jobs{{{JOB}}})", "{{kind}} {{state}} {{tier}}")],
        ),
        panel(
            "Steps detected",
            "timeseries",
            "ops",
            [
                query(
                    f"sum by (format) (rate(tierd_checkpoints_detected_total{{{NODE}}}[{RATE}]))",
                    "{{format}}",
                )
            ],
        ),
    ]


def failures() -> list[Panel]:
    """What failed, and what is tried again."""
    return [
        row("Failures and retries"),
        panel(
            "Hop failures by reason (retryable and no_space are retried)",
            "timeseries",
            "ops",
            [
                query(
                    f"sum by (tier, reason) (rate(tierd_transfer_failures_total{{{NODE}}}[{RATE}]))",
                    "{{tier}} {{reason}}",
                )
            ],
        ),
        panel(
            "Replicas failed",
            "timeseries",
            "none",
            [query(f'max by (tier) (tierd_replicas{{{JOB}, state="failed"}})', "{{tier}}")],
        ),
        panel(
            "Deletions refused and failed",
            "timeseries",
            "ops",
            [
                query(
                    f"sum by (tier, reason) (rate(tierd_deletions_refused_total{{{NODE}}}[{RATE}]))",
                    "refused {{tier}} {{reason}}",
                ),
                query(
                    f"sum by (tier) (rate(tierd_deletion_failures_total{{{NODE}}}[{RATE}]))",
                    "failed {{tier}}",
                ),
            ],
        ),
    ]


def space() -> list[Panel]:
    """Each tier's room, what is in it, and eviction."""
    return [
        row("Tier space and eviction"),
        panel(
            "Free space by node and tier",
            "timeseries",
            "percentunit",
            [
                query(
                    f"tierd_tier_free_bytes{{{NODE}}} / tierd_tier_size_bytes{{{NODE}}}",
                    "{{instance}} {{tier}}",
                )
            ],
        ),
        panel(
            "Replicas by tier and state",
            "timeseries",
            "none",
            [query(f"max by (tier, state) (tierd_replicas{{{JOB}}}) > 0", "{{tier}} {{state}}")],
        ),
        panel(
            "Verified bytes by tier",
            "timeseries",
            "bytes",
            [query(f"max by (tier) (tierd_verified_bytes{{{JOB}}})", "{{tier}}")],
        ),
        panel(
            "Monthly storage cost by tier",
            "timeseries",
            "none",
            [
                query(
                    f"max by (tier, storage_class) (tierd_tier_storage_cost_per_month{{{JOB}}})",
                    "{{tier}} {{storage_class}}",
                )
            ],
        ),
        panel(
            "Deletions and evictions",
            "timeseries",
            "ops",
            [
                query(
                    f"sum by (tier, reason) (rate(tierd_deletions_total{{{NODE}}}[{RATE}]))",
                    "{{tier}} {{reason}}",
                )
            ],
        ),
        panel(
            "Eviction blocked",
            "timeseries",
            "bool_yes_no",
            [
                query(
                    f"max by (instance, tier) (tierd_tier_pressure_blocked{{{NODE}}})",
                    "{{instance}} {{tier}}",
                )
            ],
        ),
    ]


def scrub() -> list[Panel]:
    """How far each tier's scrub pass is, and what it found."""
    return [
        row("Scrub"),
        panel(
            "Replicas checked within the pass",
            "timeseries",
            "none",
            [query(f"max by (tier, state) (tierd_scrub_pass_replicas{{{JOB}}})", "{{tier}} {{state}}")],
        ),
        panel(
            "Oldest check by tier",
            "timeseries",
            "s",
            [query(f"max by (tier) (tierd_scrub_oldest_check_age_seconds{{{JOB}}})", "{{tier}}")],
        ),
        panel(
            "Bytes re-checked",
            "timeseries",
            "Bps",
            [query(f"sum by (tier) (rate(tierd_scrub_bytes_total{{{NODE}}}[{RATE}]))", "{{tier}}")],
        ),
        panel(
            "Mismatches found (1 h)",
            "timeseries",
            "none",
            [query(f"sum by (tier) (increase(tierd_scrub_mismatches_total{{{NODE}}}[1h]))", "{{tier}}")],
        ),
    ]


def process() -> list[Panel]:
    """The daemons' own CPU and memory."""
    return [
        row("Daemons"),
        panel(
            "CPU",
            "timeseries",
            "percentunit",
            [query(f"rate(process_cpu_seconds_total{{{NODE}}}[{RATE}])", "{{instance}}")],
        ),
        panel(
            "Resident memory",
            "timeseries",
            "bytes",
            [query(f"process_resident_memory_bytes{{{NODE}}}", "{{instance}}")],
        ),
    ]


def layout(panels: list[Panel]) -> list[Panel]:
    """Ids and grid positions: a row spans the width, other panels go three to a line."""
    x = y = 0
    for number, item in enumerate(panels, start=1):
        item["id"] = number
        if item["type"] == "row":
            y += 8 if x else 0
            item["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            x, y = 0, y + 1
            continue
        item["gridPos"] = {"h": 8, "w": 8, "x": x, "y": y}
        x += 8
        if x == 24:
            x, y = 0, y + 8
    return panels


def variable(name: str, label_query: str) -> dict[str, Any]:
    """A multi-value query variable over one label, ``All`` by default."""
    return {
        "name": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": label_query, "refId": "variable"},
        "definition": label_query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".+",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard() -> dict[str, Any]:
    """The whole dashboard."""
    panels = [*overview(), *recovery(), *movement(), *failures(), *space(), *scrub(), *process()]
    return {
        "uid": "tierd",
        "title": "tierd",
        "description": "Checkpoint tiering: recovery point, copies, failures, space, fleet, scrub",
        "tags": ["tierd"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                variable("job", "label_values(tierd_build_info, job)"),
                variable("instance", 'label_values(tierd_build_info{job=~"$job"}, instance)'),
            ]
        },
        "annotations": {"list": []},
        "panels": layout(panels),
    }


def render() -> str:
    """The dashboard as the committed file holds it."""
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    """Write tierd.json, or with ``--check`` say whether it is current."""
    text = render()
    if "--check" in argv:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is not the generator's output: run python {Path(__file__).name}")
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
