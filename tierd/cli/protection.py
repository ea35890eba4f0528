"""``tierd pin``, ``unpin``, ``hold``, ``release``, ``delete`` and ``undelete``: what keeps a checkpoint."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tierd.cli.display import checkpoint_label, format_time, holds_text, table
from tierd.cli.http import DaemonApi, JsonObject
from tierd.cli.remote import command, connect, emit, resolve, with_ref

__all__ = ["add_commands"]


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the six commands to ``sub`` (an argparse subparsers action)."""
    reason = "why (kept in the audit log)"
    pin = with_ref(command(sub, common, "pin", "pin a checkpoint: kept on every tier", _cmd_pin))
    pin.add_argument("--reason", default="", help=reason)
    unpin = with_ref(command(sub, common, "unpin", "give a pinned checkpoint back to retention", _cmd_unpin))
    unpin.add_argument("--reason", default="", help=reason)
    hold = with_ref(command(sub, common, "hold", "set a named legal hold (admin)", _cmd_hold))
    hold.add_argument("--name", required=True, help="the hold's name, e.g. case-9")
    hold.add_argument("--reason", required=True, help=reason)
    release = with_ref(command(sub, common, "release", "release a legal hold (admin)", _cmd_release))
    release.add_argument("--name", required=True, help="the hold's name")
    release.add_argument("--reason", default="", help=reason)
    delete = with_ref(
        command(sub, common, "delete", "delete on every tier after its delay (admin)", _cmd_delete)
    )
    delete.add_argument("--reason", required=True, help=reason)
    undelete = with_ref(command(sub, common, "undelete", "cancel a deletion and pin", _cmd_undelete))
    undelete.add_argument("--reason", default="", help=reason)


def _mutate(
    args: argparse.Namespace, call: Callable[[DaemonApi, int], JsonObject], say: Callable[[JsonObject], str]
) -> int:
    """Resolve the checkpoint, call the API on it, print its JSON or ``label: say(...)``."""
    with connect(args) as client:
        body = call(client, resolve(client, args.ref))
    return emit(args, body, lambda: [f"{checkpoint_label(body)}: {say(body)}"])


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
    with connect(args) as client:
        body = client.delete(resolve(client, args.ref), args.reason)

    def lines() -> list[str]:
        rows = [(r["tier"], r["state"], format_time(r["delete_after"])) for r in body["replicas"]]
        undo = f"`tierd undelete {body['id']}` cancels it until then"
        head = f"{checkpoint_label(body)}: deletion scheduled; {undo}"
        return [head, *(f"  {line}" for line in table(("TIER", "STATE", "DELETE AFTER (UTC)"), rows))]

    return emit(args, body, lines)


def _cmd_undelete(args: argparse.Namespace) -> int:
    def say(c: JsonObject) -> str:
        return f"deletion cancelled; now pinned (`tierd unpin {c['id']}` gives it back to retention)"

    return _mutate(args, lambda cl, cid: cl.undelete(cid, args.reason), say)
