"""``tierd usage``: what each tier holds and costs a month, what retention saved, and in 30 days."""

from __future__ import annotations

import argparse
from typing import Any

from tierd.cli.display import format_bytes, table
from tierd.cli.http import JsonObject
from tierd.cli.remote import command, connect, emit

__all__ = ["add_usage", "usage_lines"]


def add_usage(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``usage`` to ``sub`` (an argparse subparsers action)."""
    usage = command(
        sub, common, "usage", "bytes and monthly cost per tier, storage class and run; in 30 days", _cmd_usage
    )
    usage.add_argument(
        "--cadence-days",
        type=int,
        default=7,
        metavar="DAYS",
        help="days the save cadence is measured over (1-90)",
    )
    usage.add_argument("--runs", type=int, default=10, metavar="N", help="list the N biggest runs (0-1000)")


def _cmd_usage(args: argparse.Namespace) -> int:
    with connect(args) as client:
        body = client.usage(cadence_days=args.cadence_days, runs=args.runs)
    return emit(args, body, lambda: usage_lines(body))


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def usage_lines(body: JsonObject) -> list[str]:
    """``tierd usage``'s lines: a row per tier, the totals, storage classes, then the biggest runs."""
    rows = [
        (
            t["name"],
            t["storage_class"],
            format_bytes(t["bytes"]),
            _money(t["cost_per_month"]),
            format_bytes(t["retention_deleted_bytes"]),
            _money(t["retention_saved_per_month"]),
            format_bytes(t["projected_bytes"]),
            _money(t["projected_cost_per_month"]),
        )
        for t in body["tiers"]
    ]
    totals = body["totals"]
    rows.append(
        (
            "total",
            "",
            format_bytes(totals["bytes"]),
            _money(totals["cost_per_month"]),
            format_bytes(totals["retention_deleted_bytes"]),
            _money(totals["retention_saved_per_month"]),
            format_bytes(totals["projected_bytes"]),
            _money(totals["projected_cost_per_month"]),
        )
    )
    days = body["projection_days"]
    headers = (
        "TIER",
        "CLASS",
        "STORED",
        "COST/MONTH",
        "DELETED 30D",
        "SAVED/MONTH",
        f"IN {days}D",
        "COST/MONTH",
    )
    lines = table(headers, rows, right=(2, 3, 4, 5, 6, 7))
    if totals["unpriced"]:
        lines.append(f"not priced: {', '.join(totals['unpriced'])} (set tiers[].price_per_gb_month)")
    lines.append(
        f"cadence measured over the last {body['cadence_days']} days; costs per month in the prices' currency"
    )
    lines += ["", *_class_lines(body), "", *_run_lines(body)]
    return lines


def _class_lines(body: JsonObject) -> list[str]:
    rows = [
        (c["storage_class"], ", ".join(c["tiers"]), format_bytes(c["bytes"]), _money(c["cost_per_month"]))
        for c in body["storage_classes"]
    ]
    return table(("CLASS", "TIERS", "STORED", "COST/MONTH"), rows, right=(2, 3))


def _run_lines(body: JsonObject) -> list[str]:
    rows = [
        (
            r["run"],
            format_bytes(r["bytes"]),
            "-" if r["steps_per_day"] is None else f"{r['steps_per_day']:.1f}",
            "-" if r["mean_step_bytes"] is None else format_bytes(r["mean_step_bytes"]),
        )
        for r in body["runs"]
    ]
    shown = f"runs: {len(rows)} biggest of {body['runs_total']}"
    return [shown, *table(("RUN", "STORED", "STEPS/DAY", "MEAN STEP"), rows, right=(1, 2, 3))]
