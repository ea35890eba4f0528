"""``tierd ls``, ``show``, ``verify``, ``audit``, ``runs`` and ``latest``: what the catalog holds."""

from __future__ import annotations

import argparse
from typing import Any

from tierd.cli.display import (
    checkpoint_label,
    format_bytes,
    format_time,
    parts_lines,
    protection,
    table,
)
from tierd.cli.http import JsonObject
from tierd.cli.remote import checkpoint_ref, command, connect, emit, resolve, with_ref

__all__ = ["add_audit", "add_listing", "add_runs", "add_verify"]


def add_listing(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``ls`` and ``show`` to ``sub`` (an argparse subparsers action)."""
    ls = command(sub, common, "ls", "list checkpoints, newest first", _cmd_ls)
    ls.add_argument("--run", help="only this run")
    ls.add_argument("--limit", type=int, default=50, help="at most this many checkpoints (default: 50)")
    with_ref(command(sub, common, "show", "show one checkpoint with its files", _cmd_show))


def add_verify(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``verify``."""
    with_ref(command(sub, common, "verify", "re-check a checkpoint's bytes on every tier now", _cmd_verify))


def add_audit(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``audit``."""
    audit = command(sub, common, "audit", "the audit log, newest first", _cmd_audit)
    audit.add_argument("ref", type=checkpoint_ref, nargs="?", metavar="ID|RUN:STEP", help="only this one")
    audit.add_argument("--limit", type=int, default=50, help="at most this many events (default: 50)")
    audit.add_argument("--before", type=int, help="only events older than this event id")


def add_runs(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``runs`` and ``latest``."""
    command(sub, common, "runs", "every run: its newest complete step, and per tier", _cmd_runs)
    latest = command(sub, common, "latest", "a run's newest complete step (to resume from)", _cmd_latest)
    latest.add_argument("run", help="the run's name")
    latest.add_argument("--tier", help="the newest verified on this tier")
    latest.add_argument("--durable", action="store_true", help="the newest verified on a durable tier")


def _cmd_ls(args: argparse.Namespace) -> int:
    with connect(args) as client:
        page = client.checkpoints(run=args.run, limit=args.limit)
    return emit(args, page, lambda: _ls_lines(page))


def _ls_lines(page: JsonObject) -> list[str]:
    rows = [
        (
            c["id"],
            c["run"],
            c["step"],
            c["state"],
            format_bytes(c["total_bytes"]),
            protection(c),
            " ".join(f"{r['tier']}={r['state']}" for r in c["replicas"]),
        )
        for c in page["items"]
    ]
    lines = table(("ID", "RUN", "STEP", "STATE", "SIZE", "PROTECTION", "REPLICAS"), rows, right=(0, 2, 4))
    if page["next_offset"] is not None:
        lines.append(f"({len(rows)} of {page['total']}; --limit shows more)")
    return lines


def _cmd_show(args: argparse.Namespace) -> int:
    with connect(args) as client:
        body = client.checkpoint(resolve(client, args.ref))
    return emit(args, body, lambda: _show_lines(body))


def _show_lines(c: JsonObject) -> list[str]:
    facts = [
        ("state", f"{c['state']} ({c['format']}" + (f", node {c['node']})" if c["node"] else ")")),
        ("path", c["path"]),
        ("size", f"{format_bytes(c['total_bytes'])} in {c['file_count']} files"),
        ("created", format_time(c["created_at"])),
        ("completed", format_time(c["completed_at"])),
        ("pinned", "yes" if c["pinned"] else "no"),
        *(
            (f"hold {h['name']}", f"{h['reason']} (by {h['actor']}, {format_time(h['created_at'])})")
            for h in c["holds"]
        ),
        ("metrics", " ".join(f"{k}={v:g}" for k, v in sorted(c["metrics"].items())) or "-"),
        ("node loss", _node_loss(c.get("node_loss"))),
    ]
    lines = [checkpoint_label(c), *(f"  {line}" for line in table(("", ""), facts)[1:])]
    replicas = [
        (
            r["tier"],
            r["state"],
            format_time(r["verified_at"]),
            format_time(r["delete_after"]),
            r["delete_reason"] or r["error"] or "",
        )
        for r in c["replicas"]
    ]
    lines += ["", *table(("TIER", "STATE", "VERIFIED (UTC)", "DELETE AFTER (UTC)", "NOTE"), replicas)]
    lines += parts_lines(c)
    files = [
        (
            f["path"],
            format_bytes(f["size"]),
            _owner(f),
            f["mode"] or "-",
            f"{f['checksum_algorithm']}:{f['checksum']}",
        )
        for f in c["files"]
    ]
    return [*lines, "", *table(("FILE", "SIZE", "OWNER", "MODE", "CHECKSUM"), files, right=(1,))]


def _owner(f: JsonObject) -> str:
    """``uid:gid`` as numbers (``ls -n``): the CLI may run where the daemon's names mean nothing."""
    return "-" if f["uid"] is None else f"{f['uid']}:{f['gid']}"


def _node_loss(loss: JsonObject | None) -> str:
    """Whether the loss of one node loses the step: safe since when, or what holds copies."""
    if loss is None:
        return "-"
    if loss["safe"]:
        return f"safe since {format_time(loss['since'])}"
    held = ", ".join(f"{p['node']} on {p['holder']} ({p['state']})" for p in loss["peer_copies"])
    return "not safe: a part is verified only on its own node" + (f"; peer copies: {held}" if held else "")


def _cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when no replica was found bad, 1 otherwise (a bad one is being copied again)."""
    with connect(args) as client:
        body = client.verify(resolve(client, args.ref))

    def lines() -> list[str]:
        rows = [(t["tier"], t["result"], _verify_note(t)) for t in body["tiers"]]
        verdict = "ok" if body["ok"] else "bad replicas found (marked failed, copied again)"
        return [f"checkpoint {body['checkpoint_id']}: {verdict}", *table(("TIER", "RESULT", "NOTE"), rows)]

    emit(args, body, lines)
    return 0 if body["ok"] else 1


def _verify_note(t: JsonObject) -> str:
    if t["files"]:
        return ", ".join(f"{f['file']} ({f['problem']})" for f in t["files"])
    return "" if t["result"] == "ok" else str(t["detail"])


def _cmd_audit(args: argparse.Namespace) -> int:
    with connect(args) as client:
        checkpoint_id = resolve(client, args.ref) if args.ref else None
        page = client.audit(checkpoint_id, limit=args.limit, before=args.before)
    return emit(args, page, lambda: _audit_lines(page))


def _audit_lines(page: JsonObject) -> list[str]:
    rows = [
        (
            e["id"],
            format_time(e["at"]),
            e["actor"],
            e["action"],
            e["checkpoint_id"] or "-",
            e["tier"] or "-",
            e["reason"],
        )
        for e in page["items"]
    ]
    lines = table(("ID", "AT (UTC)", "ACTOR", "ACTION", "CHECKPOINT", "TIER", "REASON"), rows, right=(0, 4))
    if page["next_before"] is not None:
        lines.append(f"(older events: --before {page['next_before']})")
    return lines


def _cmd_runs(args: argparse.Namespace) -> int:
    with connect(args) as client:
        page = client.runs()

    def lines() -> list[str]:
        def step(value: int | None) -> str:
            return "-" if value is None else str(value)

        rows = [
            (
                r["run"],
                r["checkpoints"],
                step(r["newest_step"]),
                " ".join(f"{t}={step(v['newest_verified_step'])}" for t, v in r["tiers"].items()) or "-",
            )
            for r in page["items"]
        ]
        return table(("RUN", "CHECKPOINTS", "NEWEST", "NEWEST VERIFIED PER TIER"), rows, right=(1, 2))

    return emit(args, page, lines)


def _cmd_latest(args: argparse.Namespace) -> int:
    with connect(args) as client:
        body = client.latest(args.run, tier=args.tier, durable=args.durable)
    verified = " ".join(r["tier"] for r in body["replicas"] if r["state"] == "verified") or "-"
    return emit(args, body, [f"{checkpoint_label(body)} at {body['path']} (verified on: {verified})"])
