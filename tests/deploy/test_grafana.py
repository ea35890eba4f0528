"""The Grafana dashboard in deploy/grafana/: the committed JSON is its generator's output, and its
panels are sound (every query run against a real Prometheus: tests/integration/test_prometheus.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"


def generator() -> ModuleType:
    """deploy/grafana/generate.py, imported from its path."""
    spec = importlib.util.spec_from_file_location("tierd_dashboard", GRAFANA / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def queries(dashboard: dict[str, Any]) -> dict[str, list[str]]:
    """Each panel's title and its queries (rows have none)."""
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in dashboard["panels"] if p["type"] != "row"}


def test_the_committed_dashboard_is_the_generators_output() -> None:
    assert (GRAFANA / "tierd.json").read_text() == generator().render(), (
        "run: python deploy/grafana/generate.py"
    )


def test_the_panels_cover_the_operators_questions_without_overlapping() -> None:
    dashboard = json.loads((GRAFANA / "tierd.json").read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == [
        "Fleet",
        "Recovery point",
        "Copies",
        "Failures and retries",
        "Tier space and eviction",
        "Scrub",
        "Daemons",
    ]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine
    for title, exprs in queries(dashboard).items():
        assert exprs, title
        assert all(e.strip() for e in exprs), title
