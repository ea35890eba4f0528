"""A real daemon that moved steps between two local tiers, scraped over HTTP and by a real Prometheus.

One daemon for the module (``nvme`` with free-space marks -> ``pfs``, scrubbed; the access log
on; one ``operate`` token), and one Prometheus scraping it every second with the alert rules
of deploy/prometheus/ loaded. Three steps are written and announced (as a training job does)
once Prometheus has scraped the daemon, so the counters move under its eyes. The checks:

- the exposition as Prometheus reads it: no ``*_created``, the process, ``tierd_build_info``
  with its revision, every tier's space without anyone asking ``/v1/tiers``, counters at 0;
- the access log, in the daemon's own log file;
- every rule is loaded, evaluated and healthy; each rule's expression evaluates, and every
  series an alert watches exists, while on this healthy daemon no alert's expression
  returns anything (but the tier-full one where the disk under the test really is full);
- every query of the Grafana dashboard (deploy/grafana/tierd.json) evaluates and returns data.

About 10 s in all on the loaded 2-core machine, shared by the module's tests: the daemon and
Prometheus start together (4 s), Prometheus' first scrape comes ~5 s after it starts (its
service discovery's update interval; 3 s more), three small copies (2 s), the rules
evaluated after them (1 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.fixtures.prometheus import PrometheusServer
from tests.integration.daemon_helpers import config_dict, wait_for, write_files

pytestmark = pytest.mark.xdist_group("prometheus")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "tierd.rules.yml"
DASHBOARD = DEPLOY / "grafana" / "tierd.json"
RUN = "demo"
STEPS = 3
SECRET = "prom-test-secret-token"
AUTH = {"Authorization": f"Bearer {SECRET}"}
STEP_FILES = {"__0_0.distcp": 48 * 1024, "__1_0.distcp": 16 * 1024 + 3, ".metadata": 512}
#: Grafana's variables as the dashboard's "All" and a one-minute rate window resolve them.
VARIABLES = {"$__rate_interval": "1m", "$instance": ".+", "$job": "tierd"}


@dataclass
class Lab:
    root: Path
    daemon: Daemon
    prometheus: PrometheusServer
    http: httpx.Client

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.get(f"{self.daemon.url}{path}", **kw)

    def verified_on_pfs(self) -> int:
        page = self.get("/v1/checkpoints", params={"run": RUN}, headers=AUTH).json()
        return sum(
            1
            for c in page["items"]
            if any(r["tier"] == "pfs" and r["state"] == "verified" for r in c["replicas"])
        )


def _config(root: Path) -> dict[str, Any]:
    marks = {"evict_below": "1%", "evict_to": "2%"}
    tiers: list[dict[str, Any]] = [
        {"name": "nvme", "kind": "posix", "path": str(root / "nvme"), "shared": False, "free_space": marks},
        {
            "name": "pfs",
            "kind": "posix",
            "path": str(root / "pfs"),
            "scrub": {"every": "1h", "bandwidth": "1GB"},
            "price_per_gb_month": "0.02",
        },
    ]
    for tier in tiers:
        Path(tier["path"]).mkdir(parents=True)
    (root / "nvme" / RUN).mkdir()
    return config_dict(
        root,
        tiers,
        api={
            "listen": f"127.0.0.1:{free_port()}",
            "access_log": True,
            "tokens": [{"name": "ci-job", "token": SECRET, "role": "operate"}],
        },
    )


def _save(lab: Lab, step: int) -> None:
    """A step written on tier 0, then announced as a training job does (``POST /v1/checkpoints``)."""
    folder = lab.root / "nvme" / RUN / f"step{step}"
    write_files(folder, STEP_FILES, seed=step)
    saved = time.time() - 60  # a minute ago: settled, and a recovery point well within its objective
    for path in folder.iterdir():
        os.utime(path, (saved, saved))  # write_files dates them 1970
    body = {"run": RUN, "step": step, "path": f"{RUN}/step{step}", "format": "dcp"}
    answer = lab.http.post(f"{lab.daemon.url}/v1/checkpoints", json=body, headers=AUTH)
    assert answer.status_code in (200, 201), answer.text


def _evaluated(lab: Lab) -> None:
    """Wait until Prometheus scraped the copies and evaluated every rule after that."""
    copied = f'tierd_transfers_total{{job="tierd", tier="pfs", result="verified"}} == {STEPS}'
    wait_for(lambda: lab.prometheus.query(copied), 30, "Prometheus to scrape the copies", interval=0.2)
    objective = 'tierd:recovery_point_objective_seconds{tier="pfs"}'
    wait_for(lambda: lab.prometheus.query(objective), 30, "the rules to be evaluated on them", interval=0.2)
    # A rate needs two samples of a series in its window: the detected counter's series begins
    # at the first detection, so wait for a second scrape of it (once the only scrape was the
    # one after the save, and the "Steps detected" panel's rate came back empty).
    twice = 'count_over_time(tierd_checkpoints_detected_total{job="tierd"}[1m]) >= 2'
    wait_for(lambda: lab.prometheus.query(twice), 30, "two scrapes of the detected steps", interval=0.2)
    never = "0001-01-01T00:00:00Z"
    wait_for(
        lambda: all(r["lastEvaluation"] != never for r in lab.prometheus.rules()),
        30,
        "every rule evaluated",
        interval=0.2,
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("prometheus")
    daemon = Daemon.prepare(root, _config(root))
    prometheus = PrometheusServer(root / "prometheus")
    with contextlib.ExitStack() as stack:
        stack.callback(daemon.stop)
        stack.callback(prometheus.stop)
        # Prometheus first: its first scrape comes ~5 s after it starts (service discovery's
        # update interval), time the daemon's start-up overlaps.
        prometheus.start("tierd", [daemon.url.removeprefix("http://")], [RULES])
        daemon.start()
        daemon.wait_ready()
        lab = Lab(root, daemon, prometheus, stack.enter_context(httpx.Client(timeout=10)))
        wait_for(lambda: prometheus.query('up{job="tierd"} == 1'), 30, "Prometheus' first scrape", 0.1)
        for step in range(1, STEPS + 1):
            _save(lab, step)
        wait_for(lambda: lab.verified_on_pfs() == STEPS, 60, "every step verified on pfs", interval=0.1)
        _evaluated(lab)
        yield lab


def _scrape(lab: Lab) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    answer = lab.get("/metrics")  # no token: /metrics is public
    assert answer.status_code == 200
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_the_scrape_has_the_process_the_build_and_every_tiers_space(lab: Lab) -> None:
    samples = _scrape(lab)
    assert [name for name in samples if name.endswith("_created")] == []
    assert next(iter(samples["process_resident_memory_bytes"].values())) > 0
    assert next(iter(samples["process_cpu_seconds_total"].values())) > 0
    [(labels, one)] = samples["tierd_build_info"].items()
    assert (set(dict(labels)), one) == ({"revision", "version"}, 1)
    for tier in ("nvme", "pfs"):  # nobody asked /v1/tiers: read at the scrape
        assert samples["tierd_tier_size_bytes"][(("tier", tier),)] > 0
        assert samples["tierd_tier_free_bytes"][(("tier", tier),)] > 0
    assert samples["tierd_transfers_total"][(("result", "verified"), ("tier", "pfs"))] == STEPS
    assert samples["tierd_transfer_failures_total"][(("reason", "integrity"), ("tier", "pfs"))] == 0
    assert samples["tierd_scrub_mismatches_total"][(("tier", "pfs"),)] == 0
    assert samples["tierd_replicas"][(("state", "verified"), ("tier", "pfs"))] == STEPS
    assert samples["tierd_tier_pressure_blocked"] == {(("tier", "nvme"),): 0}
    assert samples["tierd_catalog_up"] == {(): 1}


def test_the_access_log_names_the_route_and_the_token_never_the_token_itself(lab: Lab) -> None:
    listed = lab.get("/v1/checkpoints", params={"run": RUN}, headers=AUTH)
    first = listed.json()["items"][0]["id"]
    assert lab.get(f"/v1/checkpoints/{first}", headers=AUTH).status_code == 200
    assert lab.get("/v1/checkpoints", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert lab.daemon.logged(
        "http_request", method="GET", path="/v1/checkpoints", status=200, caller="ci-job"
    )
    assert lab.daemon.logged("http_request", path="/v1/checkpoints/{checkpoint_id}", caller="ci-job")
    assert lab.daemon.logged("http_request", path=None, status=401, caller=None)
    assert lab.daemon.logged("http_request", path="/metrics", caller=None)  # Prometheus' scrapes
    log = lab.daemon.log_path.read_text()
    assert SECRET not in log
    assert not [
        e for e in lab.daemon.events() if e.get("event") == "http_request" and str(first) in str(e["path"])
    ]


def _nearly_full(lab: Lab) -> bool:
    ratios = lab.prometheus.query('tierd_tier_free_bytes{job="tierd"} / tierd_tier_size_bytes{job="tierd"}')
    return any(float(r["value"][1]) < 0.05 for r in ratios)


def test_every_rule_evaluates_and_watches_series_the_daemon_exports(lab: Lab) -> None:
    loaded = lab.prometheus.rules()
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert sorted(r["name"] for r in loaded) == sorted(r.get("alert") or r["record"] for r in rules)
    assert [(r["name"], r["health"], r.get("lastError", "")) for r in loaded if r["health"] != "ok"] == []
    results = {r.get("alert") or r["record"]: lab.prometheus.query(r["expr"]) for r in rules}
    # A healthy daemon fires nothing: only the objective table (a recording rule) returns data,
    # and the tier-full alert where the test's own disk is under 5% free.
    returning = {name for name, result in results.items() if result}
    expected = {"tierd:recovery_point_objective_seconds"} | (
        {"TierdTierNearlyFull"} if _nearly_full(lab) else set()
    )
    assert returning == expected
    assert {r["metric"]["tier"] for r in results["tierd:recovery_point_objective_seconds"]} == {"nvme", "pfs"}
    for rule in rules:  # what the alerts watch exists, so they can fire
        for name in set(re.findall(r"\btierd_[a-z_]+\b", rule["expr"])):
            assert lab.prometheus.query(f'group({name}{{job="tierd"}})'), (rule.get("alert"), name)


def _dashboard_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    out = []
    for panel in (p for p in panels if p["type"] != "row"):
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            out.append((panel["title"], expr))
    return out


def test_every_dashboard_query_evaluates_and_returns_data(lab: Lab) -> None:
    empty = [(title, expr) for title, expr in _dashboard_queries() if not lab.prometheus.query(expr)]
    assert empty == []
    moved = lab.prometheus.query('sum by (tier) (rate(tierd_transfer_bytes_total{job="tierd"}[1m]))')
    assert {r["metric"]["tier"]: float(r["value"][1]) > 0 for r in moved}["pfs"]
