"""``tierd tiers``, ``reserve`` and ``retention plan``: each tier's space, and what retention does."""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ByteSize, TypeAdapter, ValidationError

from tierd.cli.display import format_bytes, format_duration, format_time, table
from tierd.cli.http import JsonObject
from tierd.cli.remote import command, connect, emit

__all__ = ["add_reserve", "add_retention", "add_tiers"]

_BYTE_SIZE: TypeAdapter[ByteSize] = TypeAdapter(ByteSize)


def add_tiers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``tiers`` to ``sub`` (an argparse subparsers action)."""
    command(sub, common, "tiers", "each tier's space, policy and replicas", _cmd_tiers)


def add_reserve(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``reserve``."""
    reserve = command(sub, common, "reserve", "make room on a POSIX tier before a save", _cmd_reserve)
    reserve.add_argument("tier", help="the POSIX tier to make room on")
    reserve.add_argument("size", type=_size, help="bytes to make room for: 500GB, 1TiB or a number")


def add_retention(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``retention plan``."""
    retention = sub.add_parser("retention", help="retention").add_subparsers(metavar="COMMAND")
    plan = command(retention, common, "plan", "what retention keeps, deletes and blocks, and why", _cmd_plan)
    plan.add_argument("--tier", help="only this tier")
    plan.add_argument("--run", help="only this run")
    plan.add_argument("--action", choices=("keep", "delete", "blocked"), help="only this action")


def _size(text: str) -> int:
    try:
        return int(_BYTE_SIZE.validate_python(text))
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (500GB, 1TiB or bytes)") from None


def _cmd_tiers(args: argparse.Namespace) -> int:
    with connect(args) as client:
        tiers = client.tiers()
    return emit(args, tiers, lambda: _tier_lines(tiers))


def _tier_lines(tiers: list[JsonObject]) -> list[str]:
    def maybe_bytes(value: int | None) -> str:
        return "-" if value is None else format_bytes(value)

    def marks(t: JsonObject) -> str:
        space = t["free_space"]
        return f"{space['evict_below']} -> {space['evict_to']}" if space else "-"

    rows = [
        (
            t["name"],
            t["kind"],
            "yes" if t["durable"] else "no",
            t["policy"],
            format_duration(t["delete_delay_seconds"]),
            maybe_bytes(t["size_bytes"]),
            maybe_bytes(t["free_bytes"]),
            marks(t),
            " ".join(f"{state}={n}" for state, n in sorted(t["replicas"].items())) or "-",
            "-"
            if t["newest_verified_age_seconds"] is None
            else format_duration(t["newest_verified_age_seconds"]),
        )
        for t in tiers
    ]
    headers = (
        "TIER",
        "KIND",
        "DURABLE",
        "POLICY",
        "DELAY",
        "SIZE",
        "FREE",
        "EVICT",
        "REPLICAS",
        "NEWEST AGE",
    )
    lines = table(headers, rows, right=(5, 6))
    return lines + [
        f"{t['name']}: under disk pressure: {t['pressure_blocked']}" for t in tiers if t["pressure_blocked"]
    ]


def _cmd_reserve(args: argparse.Namespace) -> int:
    with connect(args) as client:
        body = client.reserve(args.tier, args.size)

    def lines() -> list[str]:
        free, wanted = format_bytes(body["free_bytes"]), format_bytes(body["wanted_free_bytes"])
        room = f"tier {body['tier']}: {free} free, {wanted} wanted"
        if not body["evicted"]:
            return [room]
        ids = " ".join(str(i) for i in body["evicted"])
        return [f"{room}; evicted {format_bytes(body['evicted_bytes'])}: checkpoints {ids}"]

    return emit(args, body, lines)


def _cmd_plan(args: argparse.Namespace) -> int:
    with connect(args) as client:
        plan = client.retention_plan(tier=args.tier, run=args.run, action=args.action)
    return emit(args, plan, lambda: _plan_lines(plan))


def _plan_lines(plan: JsonObject) -> list[str]:
    mode = "retention.dry_run is on: the daemon acts on none of it" if plan["dry_run"] else "a dry run"
    lines = [f"retention plan at {format_time(plan['generated_at'])} UTC ({mode})"]
    for t in plan["tiers"]:
        counts = ", ".join(f"{action} {n}" for action, n in t["counts"].items())
        durable = "durable" if t["durable"] else "not durable"
        delay = format_duration(t["delete_delay_seconds"])
        lines += ["", f"{t['tier']} ({durable}, policy {t['policy']}, delete delay {delay}): {counts}"]
        rows = [
            (
                i["checkpoint_id"],
                i["run"],
                i["step"],
                i["replica_state"],
                i["action"],
                i["policy"],
                i["backing_tier"] or "-",
                i["reason"],
            )
            for i in t["items"]
        ]
        if rows:
            headers = ("ID", "RUN", "STEP", "REPLICA", "ACTION", "POLICY", "BACKED BY", "REASON")
            lines += [f"  {line}" for line in table(headers, rows, right=(0, 2))]
    return lines
