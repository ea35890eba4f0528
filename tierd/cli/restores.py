"""``tierd restore`` (followed to its end with ``--wait``) and ``jobs``: the work in flight."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from tierd.cli.completion import directories
from tierd.cli.display import format_bytes, format_duration, format_time, printable, table
from tierd.cli.http import DaemonApi, JsonObject
from tierd.cli.remote import DIGITS, CheckpointRef, checkpoint_ref, command, connect, emit
from tierd.cli.terminal import redraws

__all__ = ["WAIT_POLL", "add_commands"]

#: Seconds between two looks at a restore followed with ``--wait``.
WAIT_POLL = 0.5
_RESTORE_END = frozenset({"done", "failed", "cancelled"})


def _ranks(text: str) -> list[int]:
    """``0-7`` or ``0,2,4-5``; raises argparse.ArgumentTypeError for anything else."""
    ranks: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not DIGITS.fullmatch(low) or (dash and not DIGITS.fullmatch(high)):
            raise argparse.ArgumentTypeError(f"{text!r} is not a rank list such as 0-7 or 0,2,4-5")
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last - first > 100_000:
            raise argparse.ArgumentTypeError(f"{part!r}: not a range of ranks")
        ranks.update(range(first, last + 1))
    return sorted(ranks)


def _owner(text: str) -> JsonObject:
    """``UID:GID`` (numbers) as the API's owner; raises argparse.ArgumentTypeError for anything else."""
    uid, colon, gid = text.partition(":")
    if not (colon and DIGITS.fullmatch(uid) and DIGITS.fullmatch(gid)):
        raise argparse.ArgumentTypeError(f"{text!r} is not UID:GID such as 1234:1234")
    return {"uid": int(uid), "gid": int(gid)}


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``restore`` and ``jobs`` to ``sub`` (an argparse subparsers action)."""
    restore = command(
        sub, common, "restore", "restore a checkpoint into a directory or to tier 0", _cmd_restore
    )
    restore.add_argument("ref", nargs="?", type=checkpoint_ref, metavar="ID|RUN:STEP", help="the checkpoint")
    restore.add_argument("--latest", metavar="RUN", help="instead of ID|RUN:STEP: the run's newest step")
    where = restore.add_mutually_exclusive_group(required=True)
    directories(where.add_argument("--to", metavar="DIR", help="the directory to restore into"))
    where.add_argument("--to-tier0", action="store_true", help="back to its own path on tier 0")
    restore.add_argument("--ranks", type=_ranks, help="only these ranks' shards (and the shared metadata)")
    restore.add_argument("--files", nargs="+", metavar="GLOB", help="only files matching these globs")
    restore.add_argument("--node", metavar="NODE", help="only the part of the step this node recorded")
    restore.add_argument("--source-tier", metavar="TIER", help="read this tier first")
    restore.add_argument("--overwrite", action="store_true", help="restore into a non-empty directory")
    restore.add_argument(
        "--owner", type=_owner, metavar="UID:GID", help="give the restored tree to this owner (admin)"
    )
    restore.add_argument("--wait", action="store_true", help="follow it to its end (progress on a terminal)")
    command(sub, common, "jobs", "copies, deletions and restores in flight", _cmd_jobs)


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
    extra = {
        "ranks": args.ranks,
        "files": args.files,
        "node": args.node,
        "source_tier": args.source_tier,
        "owner": args.owner,
    }
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
    with connect(args) as client:
        restore = client.restore(body)
        if args.wait:
            restore = _follow(client, restore, live=not args.json and redraws(sys.stdout))
    emit(args, restore, lambda: _restore_lines(restore))
    return 0 if restore["state"] in ("done", "queued", "running") else 1


def _follow(client: DaemonApi, restore: JsonObject, *, live: bool) -> JsonObject:
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
    lines = [", ".join(parts) + f" -> {r['target']}" + _read_from(r)]
    for f in r["fallbacks"]:
        lines.append(f"  {f['file']}: bad on {f['from_tier']}, taken from {f['to_tier']}")
    return lines + ([f"  error: {r['error']}"] if r["error"] else [])


def _read_from(r: JsonObject) -> str:
    """`` (from pfs)``, or with several sources what each gave: `` (from peer:node0 3 files, s3 1 file)``."""
    read: dict[str, int] = r.get("read_from") or {}  # an older daemon's answer has none
    if len(read) > 1:
        return " (from " + ", ".join(f"{name} {n} file{'s' * (n != 1)}" for name, n in read.items()) + ")"
    return f" (from {r['source_tier']})" if r["source_tier"] else ""


def _cmd_jobs(args: argparse.Namespace) -> int:
    with connect(args) as client:
        body = client.jobs()
    return emit(args, body, lambda: _jobs_lines(body))


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
