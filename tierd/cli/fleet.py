"""``tierd status`` and ``fleet``: whether this daemon is ready, and every daemon on the catalog."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tierd.cli.display import format_duration, printable, table
from tierd.cli.http import JsonObject
from tierd.cli.remote import command, connect, emit
from tierd.errors import ApiError

__all__ = ["add_fleet", "add_status", "fleet_lines"]


def add_status(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``status`` to ``sub`` (an argparse subparsers action)."""
    command(sub, common, "status", "ask the running daemon whether it is ready", _cmd_status)


def add_fleet(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``fleet``."""
    command(sub, common, "fleet", "every daemon on the catalog: heartbeat, leader, jobs", _cmd_fleet)


def _cmd_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        try:
            body = client.ready()
        except ApiError as exc:
            if args.json and exc.problem is not None:
                print(json.dumps(exc.problem, indent=2))
            else:
                print(printable(f"not ready: {exc.detail}"))
            return 1
    return emit(
        args, body, [f"ready (node {body['node']})", *(f"warning: {w}" for w in body.get("warnings", []))]
    )


def _cmd_fleet(args: argparse.Namespace) -> int:
    with connect(args) as client:
        body = client.fleet()
    return emit(args, body, lambda: fleet_lines(body))


def fleet_lines(body: JsonObject) -> list[str]:
    """``tierd fleet``'s lines: the leader, a row per node, then what each node left unfinished."""
    leader = f"{body['leader']} (term {body['term']})" if body["leader"] else "nobody"
    rows = [
        (
            n["name"],
            "silent" if n["silent"] else "live",
            "yes" if n["leader"] else "",
            f"{format_duration(n['heartbeat_age_seconds'])} ago",
            n["version"],
            n["pid"],
            ", ".join(f"{j['run']}:{j['step']} -> {j['dst_tier']}" for j in n["copying"]) or "-",
        )
        for n in body["nodes"]
    ]
    lines = [f"nodes: {len(rows)}, leader: {leader}"]
    lines += table(("NODE", "STATE", "LEADER", "HEARD", "VERSION", "PID", "COPYING"), rows, right=(5,))
    for node in body["nodes"]:
        for job in (node["unfinished"] or {}).get("jobs", []):
            hop = f"{job['src_tier'] or '-'} -> {job['dst_tier'] or '-'}"
            lines.append(
                f"  {node['name']} left {job['kind']} {job['run']}:{job['step']} {hop} ({job['state']})"
            )
        for part in (node["unfinished"] or {}).get("parts", []):
            lines.append(
                f"  {node['name']} alone holds its part of {part['run']}:{part['step']}"
                f" ({part['files']} files, {part['step_state']} step)"
            )
    return lines
