"""The alert rules in deploy/prometheus/: valid (``promtool check rules``), and each alert's unit
tests pass (``promtool test rules``). promtool comes with Debian's ``prometheus`` package, which
``.ci/run`` installs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed"
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=RULES, capture_output=True, text=True, timeout=60)


def _alerts() -> list[str]:
    groups = yaml.safe_load((RULES / "tierd.rules.yml").read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


@needs_promtool
def test_the_rules_are_valid() -> None:
    checked = _promtool("check", "rules", "tierd.rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_every_alert_passes_its_unit_tests() -> None:
    tests = sorted(p.name for p in (RULES / "tests").glob("*.yml"))
    tested = _promtool("test", "rules", *(f"tests/{name}" for name in tests))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert tested.stdout.count("SUCCESS") == len(tests)


def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not() -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for path in (RULES / "tests").glob("*.yml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case["exp_alerts"] else silent).add(case["alertname"])
    alerts = set(_alerts())
    assert alerts - fires == set(), "alerts never shown firing"
    assert alerts - silent == set(), "alerts never shown quiet"


def test_every_alert_says_what_to_do() -> None:
    groups = yaml.safe_load((RULES / "tierd.rules.yml").read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"] if "alert" in r):
        assert re.fullmatch(r"Tierd[A-Z][A-Za-z]+", rule["alert"])
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
