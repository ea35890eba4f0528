"""The ``tierd`` commands that talk to a running daemon through its API (:class:`tierd.api.client.Client`).

Each takes ``--url`` and ``--token`` (``$TIERD_TOKEN``) and ``--json``, which prints the API's
JSON as it came (control characters escaped by JSON); otherwise it prints a short line or an
aligned table, every line through ``display.printable``. A checkpoint is named by
its id or by ``RUN:STEP`` (split on the last ``:``, so a run name may hold one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ByteSize, TypeAdapter, ValidationError

from tierd.api.client import Client, JsonObject
from tierd.config import default_config_path, load_config
from tierd.display import (
    checkpoint_label,
    format_bytes,
    format_duration,
    format_time,
    holds_text,
    parts_lines,
    printable,
    protection,
    table,
)
from tierd.errors import ApiError, NotFound

__all__ = ["CheckpointRef", "add_commands", "checkpoint_ref"]

MAX_ID = 2**63 - 1
_DIGITS = re.compile(r"[0-9]+")
_BYTE_SIZE: TypeAdapter[ByteSize] = TypeAdapter(ByteSize)
Command = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class CheckpointRef:
    """A checkpoint as the user named it: an id, or a run and a step."""

    text: str
    id: int | None = None
    run: str = ""
    step: int = 0


def checkpoint_ref(text: str) -> CheckpointRef:
    """Parse ``7`` (an id) or ``RUN:STEP``; raises argparse.ArgumentTypeError for anything else."""
    if _DIGITS.fullmatch(text) and int(text) <= MAX_ID:
        return CheckpointRef(text, id=int(text))
    run, colon, step = text.rpartition(":")
    if not colon or not run or not _DIGITS.fullmatch(step) or int(step) > MAX_ID:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a checkpoint id nor RUN:STEP")
    return CheckpointRef(text, run=run, step=int(step))


def _size(text: str) -> int:
    try:
        return int(_BYTE_SIZE.validate_python(text))
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (500GB, 1TiB or bytes)") from None


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add every command that talks to the daemon to ``sub`` (an argparse subparsers action)."""
    _command(sub, common, "status", "ask the running daemon whether it is ready", _cmd_status)
    ls = _command(sub, common, "ls", "list checkpoints, newest first", _cmd_ls)
    ls.add_argument("--run", help="only this run")
    ls.add_argument("--limit", type=int, default=50)
    _with_ref(_command(sub, common, "show", "show one checkpoint with its files", _cmd_show))
    _add_protection_commands(sub, common)
    _command(sub, common, "tiers", "each tier's space, policy and replicas", _cmd_tiers)
    _with_ref(_command(sub, common, "verify", "re-check a checkpoint's bytes on every tier now", _cmd_verify))
    reserve = _command(sub, common, "reserve", "make room on a POSIX tier before a save", _cmd_reserve)
    reserve.add_argument("tier")
    reserve.add_argument("size", type=_size, help="bytes to make room for: 500GB, 1TiB or a number")
    _add_restore_commands(sub, common)
    audit = _command(sub, common, "audit", "the audit log, newest first", _cmd_audit)
    audit.add_argument("ref", type=checkpoint_ref, nargs="?", metavar="ID|RUN:STEP", help="only this one")
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--before", type=int, help="only events older than this event id")
    _command(sub, common, "fleet", "every daemon on the catalog: heartbeat, leader, jobs", _cmd_fleet)
    _command(sub, common, "runs", "every run: its newest complete step, and per tier", _cmd_runs)
    latest = _command(sub, common, "latest", "a run's newest complete step (to resume from)", _cmd_latest)
    latest.add_argument("run")
    latest.add_argument("--tier", help="the newest verified on this tier")
    latest.add_argument("--durable", action="store_true", help="the newest verified on a durable tier")
    retention = sub.add_parser("retention", help="retention").add_subparsers(metavar="COMMAND")
    plan = _command(retention, common, "plan", "what retention keeps, deletes and blocks, and why", _cmd_plan)
    plan.add_argument("--tier", help="only this tier")
    plan.add_argument("--run", help="only this run")
    plan.add_argument("--action", choices=("keep", "delete", "blocked"), help="only this action")


def _add_protection_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    reason = "why (kept in the audit log)"
    pin = _with_ref(_command(sub, common, "pin", "pin a checkpoint: kept on every tier", _cmd_pin))
    pin.add_argument("--reason", default="", help=reason)
    unpin = _with_ref(
        _command(sub, common, "unpin", "give a pinned checkpoint back to retention", _cmd_unpin)
    )
    unpin.add_argument("--reason", default="", help=reason)
    hold = _with_ref(_command(sub, common, "hold", "set a named legal hold (admin)", _cmd_hold))
    hold.add_argument("--name", required=True, help="the hold's name, e.g. case-9")
    hold.add_argument("--reason", required=True, help=reason)
    release = _with_ref(_command(sub, common, "release", "release a legal hold (admin)", _cmd_release))
    release.add_argument("--name", required=True, help="the hold's name")
    release.add_argument("--reason", default="", help=reason)
    delete = _with_ref(
        _command(sub, common, "delete", "delete on every tier after its delay (admin)", _cmd_delete)
    )
    delete.add_argument("--reason", required=True, help=reason)
    undelete = _with_ref(_command(sub, common, "undelete", "cancel a deletion and pin", _cmd_undelete))
    undelete.add_argument("--reason", default="", help=reason)


def _command(
    sub: Any, common: argparse.ArgumentParser, name: str, help_: str, func: Command
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_, parents=[common])
    parser.set_defaults(func=func)
    parser.add_argument("--url", help="the daemon's API (default: from the config's api.listen)")
    parser.add_argument("--token", default=os.environ.get("TIERD_TOKEN"), help="bearer token ($TIERD_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON")
    return parser


def _with_ref(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "ref", type=checkpoint_ref, metavar="ID|RUN:STEP", help="a checkpoint id, or RUN:STEP"
    )
    return parser


def _client(args: argparse.Namespace) -> Client:
    url = args.url
    if url is None:
        config = load_config(args.config or default_config_path())
        host = config.api.host
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104
        url = f"http://{'[' + host + ']' if ':' in host else host}:{config.api.port}"
    return Client(url, token=args.token)


def _resolve(client: Client, ref: CheckpointRef) -> int:
    """The id of the checkpoint ``ref`` names; raises NotFound for a run and step not recorded."""
    if ref.id is not None:
        return ref.id
    page = client.checkpoints(run=ref.run, step=ref.step, limit=1)
    if not page["items"]:
        raise NotFound(f"run {ref.run!r} has no checkpoint at step {ref.step}")
    return int(page["items"][0]["id"])


def _emit(args: argparse.Namespace, body: object, lines: list[str] | Callable[[], list[str]]) -> int:
    """Print ``body`` as JSON with ``--json``, else the human ``lines`` (escaped); returns exit code 0."""
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print("\n".join(printable(line) for line in (lines() if callable(lines) else lines)))
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            body = client.ready()
        except ApiError as exc:
            if args.json and exc.problem is not None:
                print(json.dumps(exc.problem, indent=2))
            else:
                print(printable(f"not ready: {exc.detail}"))
            return 1
    return _emit(
        args, body, [f"ready (node {body['node']})", *(f"warning: {w}" for w in body.get("warnings", []))]
    )


def _cmd_ls(args: argparse.Namespace) -> int:
    with _client(args) as client:
        page = client.checkpoints(run=args.run, limit=args.limit)
    return _emit(args, page, lambda: _ls_lines(page))


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
    with _client(args) as client:
        body = client.checkpoint(_resolve(client, args.ref))
    return _emit(args, body, lambda: _show_lines(body))


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
        (f["path"], format_bytes(f["size"]), f"{f['checksum_algorithm']}:{f['checksum']}") for f in c["files"]
    ]
    return [*lines, "", *table(("FILE", "SIZE", "CHECKSUM"), files, right=(1,))]


def _mutate(
    args: argparse.Namespace, call: Callable[[Client, int], JsonObject], say: Callable[[JsonObject], str]
) -> int:
    """Resolve the checkpoint, call the API on it, print its JSON or ``label: say(...)``."""
    with _client(args) as client:
        body = call(client, _resolve(client, args.ref))
    return _emit(args, body, lambda: [f"{checkpoint_label(body)}: {say(body)}"])


def _held(c: JsonObject, prefix: str = "held") -> str:
    return f" ({prefix}: {holds_text(c)})" if c["holds"] else ""


def _cmd_pin(args: argparse.Namespace) -> int:
    return _mutate(args, lambda cl, cid: cl.pin(cid, args.reason), lambda c: "pinned")


def _cmd_unpin(args: argparse.Namespace) -> int:
    return _mutate(
        args, lambda cl, cid: cl.unpin(cid, args.reason), lambda c: "unpinned" + _held(c, "still held")
    )


def _cmd_hold(args: argparse.Namespace) -> int:
    return _mutate(
        args,
        lambda cl, cid: cl.add_hold(cid, args.name, args.reason),
        lambda c: f"hold {args.name} set" + _held(c),
    )


def _cmd_release(args: argparse.Namespace) -> int:
    def say(c: JsonObject) -> str:
        return f"hold {args.name} released" + (_held(c, "still held") or " (no holds left)")

    return _mutate(args, lambda cl, cid: cl.release_hold(cid, args.name, args.reason), say)


def _cmd_delete(args: argparse.Namespace) -> int:
    with _client(args) as client:
        body = client.delete(_resolve(client, args.ref), args.reason)

    def lines() -> list[str]:
        rows = [(r["tier"], r["state"], format_time(r["delete_after"])) for r in body["replicas"]]
        undo = f"`tierd undelete {body['id']}` cancels it until then"
        head = f"{checkpoint_label(body)}: deletion scheduled; {undo}"
        return [head, *(f"  {line}" for line in table(("TIER", "STATE", "DELETE AFTER (UTC)"), rows))]

    return _emit(args, body, lines)


def _cmd_undelete(args: argparse.Namespace) -> int:
    def say(c: JsonObject) -> str:
        return f"deletion cancelled; now pinned (`tierd unpin {c['id']}` gives it back to retention)"

    return _mutate(args, lambda cl, cid: cl.undelete(cid, args.reason), say)


def _cmd_tiers(args: argparse.Namespace) -> int:
    with _client(args) as client:
        tiers = client.tiers()
    return _emit(args, tiers, lambda: _tier_lines(tiers))


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


def _cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when no replica was found bad, 1 otherwise (a bad one is being copied again)."""
    with _client(args) as client:
        body = client.verify(_resolve(client, args.ref))

    def lines() -> list[str]:
        rows = [(t["tier"], t["result"], _verify_note(t)) for t in body["tiers"]]
        verdict = "ok" if body["ok"] else "bad replicas found (marked failed, copied again)"
        return [f"checkpoint {body['checkpoint_id']}: {verdict}", *table(("TIER", "RESULT", "NOTE"), rows)]

    _emit(args, body, lines)
    return 0 if body["ok"] else 1


def _verify_note(t: JsonObject) -> str:
    if t["files"]:
        return ", ".join(f"{f['file']} ({f['problem']})" for f in t["files"])
    return "" if t["result"] == "ok" else str(t["detail"])


def _cmd_reserve(args: argparse.Namespace) -> int:
    with _client(args) as client:
        body = client.reserve(args.tier, args.size)

    def lines() -> list[str]:
        free, wanted = format_bytes(body["free_bytes"]), format_bytes(body["wanted_free_bytes"])
        room = f"tier {body['tier']}: {free} free, {wanted} wanted"
        if not body["evicted"]:
            return [room]
        ids = " ".join(str(i) for i in body["evicted"])
        return [f"{room}; evicted {format_bytes(body['evicted_bytes'])}: checkpoints {ids}"]

    return _emit(args, body, lines)


def _cmd_audit(args: argparse.Namespace) -> int:
    with _client(args) as client:
        checkpoint_id = _resolve(client, args.ref) if args.ref else None
        page = client.audit(checkpoint_id, limit=args.limit, before=args.before)
    return _emit(args, page, lambda: _audit_lines(page))


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


def _cmd_plan(args: argparse.Namespace) -> int:
    with _client(args) as client:
        plan = client.retention_plan(tier=args.tier, run=args.run, action=args.action)
    return _emit(args, plan, lambda: _plan_lines(plan))


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


# Restores and the jobs in flight.

#: Seconds between two looks at a restore followed with ``--wait``.
WAIT_POLL = 0.5
_RESTORE_END = frozenset({"done", "failed", "cancelled"})


def _ranks(text: str) -> list[int]:
    """``0-7`` or ``0,2,4-5``; raises argparse.ArgumentTypeError for anything else."""
    ranks: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not _DIGITS.fullmatch(low) or (dash and not _DIGITS.fullmatch(high)):
            raise argparse.ArgumentTypeError(f"{text!r} is not a rank list such as 0-7 or 0,2,4-5")
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last - first > 100_000:
            raise argparse.ArgumentTypeError(f"{part!r}: not a range of ranks")
        ranks.update(range(first, last + 1))
    return sorted(ranks)


def _owner(text: str) -> JsonObject:
    """``UID:GID`` (numbers) as the API's owner; raises argparse.ArgumentTypeError for anything else."""
    uid, colon, gid = text.partition(":")
    if not (colon and _DIGITS.fullmatch(uid) and _DIGITS.fullmatch(gid)):
        raise argparse.ArgumentTypeError(f"{text!r} is not UID:GID such as 1234:1234")
    return {"uid": int(uid), "gid": int(gid)}


def _add_restore_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    restore = _command(
        sub, common, "restore", "restore a checkpoint into a directory or to tier 0", _cmd_restore
    )
    restore.add_argument("ref", nargs="?", type=checkpoint_ref, metavar="ID|RUN:STEP", help="the checkpoint")
    restore.add_argument("--latest", metavar="RUN", help="instead of ID|RUN:STEP: the run's newest step")
    where = restore.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", metavar="DIR", help="the directory to restore into")
    where.add_argument("--to-tier0", action="store_true", help="back to its own path on tier 0")
    restore.add_argument("--ranks", type=_ranks, help="only these ranks' shards (and the shared metadata)")
    restore.add_argument("--files", nargs="+", metavar="GLOB", help="only files matching these globs")
    restore.add_argument("--source-tier", metavar="TIER", help="read this tier first")
    restore.add_argument("--overwrite", action="store_true", help="restore into a non-empty directory")
    restore.add_argument(
        "--owner", type=_owner, metavar="UID:GID", help="give the restored tree to this owner (admin)"
    )
    restore.add_argument("--wait", action="store_true", help="follow it to its end (progress on a terminal)")
    _command(sub, common, "jobs", "copies, deletions and restores in flight", _cmd_jobs)


def _restore_body(args: argparse.Namespace) -> JsonObject:
    """The RestoreIn body the arguments ask for; raises argparse.ArgumentTypeError."""
    ref: CheckpointRef | None = args.ref
    if (ref is None) == (args.latest is None):
        raise argparse.ArgumentTypeError("name the checkpoint: ID, RUN:STEP or --latest RUN")
    body: JsonObject = (
        {"run": args.latest, "latest": True}
        if ref is None
        else ({"checkpoint_id": ref.id} if ref.id is not None else {"run": ref.run, "step": ref.step})
    )
    if args.to_tier0:
        body["to"] = "tier0"
    else:
        body["target"] = args.to if os.path.isabs(args.to) else os.path.join(os.getcwd(), args.to)
    extra = {"ranks": args.ranks, "files": args.files, "source_tier": args.source_tier, "owner": args.owner}
    body.update({key: value for key, value in extra.items() if value is not None})
    if args.overwrite:
        body["overwrite"] = True
    return body


def _cmd_restore(args: argparse.Namespace) -> int:
    try:
        body = _restore_body(args)
    except argparse.ArgumentTypeError as exc:
        print(f"tierd restore: {exc}", file=sys.stderr)
        return 2
    with _client(args) as client:
        restore = client.restore(body)
        if args.wait:
            restore = _follow(client, restore, live=not args.json and sys.stdout.isatty())
    _emit(args, restore, lambda: _restore_lines(restore))
    return 0 if restore["state"] in ("done", "queued", "running") else 1


def _follow(client: Client, restore: JsonObject, *, live: bool) -> JsonObject:
    """Poll the restore until it ends, rewriting one progress line when ``live``."""
    while restore["state"] not in _RESTORE_END:
        if live:
            print(f"\r\033[K{printable(_restore_lines(restore)[0])}", end="", flush=True)
        time.sleep(WAIT_POLL)
        restore = client.restore_status(int(restore["id"]))
    if live:
        print("\r\033[K", end="")
    return restore


def _restore_lines(r: JsonObject) -> list[str]:
    """A restore's progress, a line per file taken from another tier, and its error.

    ``restore 3 running: 45% 1.2 GiB of 2.6 GiB, 12/30 files, 250 MiB/s, 6s left (from pfs)``.
    """
    total = r["bytes_total"] or 1
    parts = [
        f"restore {r['id']} {r['state']}: {100 * r['bytes_done'] // total}%",
        f"{format_bytes(r['bytes_done'])} of {format_bytes(r['bytes_total'])}",
        f"{r['files_done']}/{r['files_total']} files",
    ]
    if r["rate_bytes_per_second"]:
        parts.append(f"{format_bytes(int(r['rate_bytes_per_second']))}/s")
    if r["eta_seconds"] is not None:
        parts.append(f"{format_duration(r['eta_seconds'])} left")
    line = (
        ", ".join(parts) + f" -> {r['target']}" + (f" (from {r['source_tier']})" if r["source_tier"] else "")
    )
    lines = [line]
    for f in r["fallbacks"]:
        lines.append(f"  {f['file']}: bad on {f['from_tier']}, taken from {f['to_tier']}")
    return lines + ([f"  error: {r['error']}"] if r["error"] else [])


def _cmd_jobs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        body = client.jobs()
    return _emit(args, body, lambda: _jobs_lines(body))


def _jobs_lines(body: JsonObject) -> list[str]:
    copies = [
        (
            c["id"],
            f"{c['run']}:{c['step']}",
            f"{c['src_tier'] or '-'} -> {c['dst_tier']}",
            c["state"],
            f"{format_bytes(c['bytes_done'])}/{format_bytes(c['bytes_total'])}",
            c["error"] or "",
        )
        for c in body["copies"]
    ]
    deletions = [
        (f"{d['run']}:{d['step']}", d["tier"], format_time(d["delete_after"]), d["reason"] or "")
        for d in body["deletions"]
    ]
    lines = [f"copies: {len(copies)}", *table(("ID", "CHECKPOINT", "HOP", "STATE", "DONE", "ERROR"), copies)]
    lines += [f"deletions: {len(deletions)}", *table(("CHECKPOINT", "TIER", "AFTER", "REASON"), deletions)]
    lines.append(f"restores: {len(body['restores'])}")
    for restore in body["restores"]:
        lines += _restore_lines(restore)
    return lines


def _cmd_fleet(args: argparse.Namespace) -> int:
    with _client(args) as client:
        body = client.fleet()
    return _emit(args, body, lambda: _fleet_lines(body))


def _fleet_lines(body: JsonObject) -> list[str]:
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


def _cmd_runs(args: argparse.Namespace) -> int:
    with _client(args) as client:
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

    return _emit(args, page, lines)


def _cmd_latest(args: argparse.Namespace) -> int:
    with _client(args) as client:
        body = client.latest(args.run, tier=args.tier, durable=args.durable)
    verified = " ".join(r["tier"] for r in body["replicas"] if r["state"] == "verified") or "-"
    return _emit(args, body, [f"{checkpoint_label(body)} at {body['path']} (verified on: {verified})"])
