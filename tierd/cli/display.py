"""Text for people, from the API's JSON: sizes, durations, times and aligned tables (the CLI's output).

Values come from the catalog, and so from training jobs and their files: every one is printed
through ``printable``, so a name holding an ESC or a newline cannot colour the terminal or
forge a row (``table`` escapes each cell, the CLI each line it prints).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from tierd.units import format_bytes

__all__ = [
    "parts_lines",
    "checkpoint_label",
    "printable",
    "format_bytes",
    "format_duration",
    "format_time",
    "holds_text",
    "protection",
    "table",
]

_DURATION_UNITS = (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1))


def printable(value: object) -> str:
    r"""``value`` as text, each character a terminal would act on escaped: ``\x1b``, ``\x0a``, ``\u202e``.

    Escapes what ``str.isprintable`` refuses (controls, line and paragraph separators, format
    characters such as bidirectional overrides, lone surrogates). Escaping twice changes nothing.
    """
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, right: Sequence[int] = ()
) -> list[str]:
    """Lines of an aligned table; columns listed in ``right`` are right-aligned (numbers).

    Each cell is ``printable``. The last column is not padded, so a long reason or path does
    not widen the others.
    """
    cells = [[printable(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(padded).rstrip())
    return lines


def format_duration(seconds: float) -> str:
    """``5400`` as ``1h30m``: the two largest units, whole seconds (``0s`` for nothing)."""
    remaining = round(seconds)
    parts = []
    for unit, size in _DURATION_UNITS:
        if remaining >= size:
            parts.append(f"{remaining // size}{unit}")
            remaining %= size
    return "".join(parts[:2]) or "0s"


def format_time(value: str | None) -> str:
    """An API timestamp as ``2026-01-01 12:00:00`` in UTC (``-`` when there is none)."""
    if not value:
        return "-"
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def checkpoint_label(checkpoint: dict[str, Any]) -> str:
    """``checkpoint 7 (demo:100)``."""
    return f"checkpoint {checkpoint['id']} ({checkpoint['run']}:{checkpoint['step']})"


def holds_text(checkpoint: dict[str, Any]) -> str:
    """The names of the checkpoint's legal holds, comma-separated (empty when none)."""
    return ", ".join(h["name"] for h in checkpoint["holds"])


def protection(checkpoint: dict[str, Any]) -> str:
    """What the user protects the checkpoint with: ``pinned``, ``held: a, b``, both, or ``-``."""
    parts = ["pinned"] if checkpoint["pinned"] else []
    if checkpoint["holds"]:
        parts.append(f"held: {holds_text(checkpoint)}")
    return "; ".join(parts) or "-"


def parts_lines(checkpoint: dict[str, Any]) -> list[str]:
    """``tierd show``'s parts (one per node) and, while the step waits, what it is missing."""
    parts = checkpoint.get("parts") or []
    missing = checkpoint.get("missing")
    if len(parts) < 2 and missing is None:
        return []
    rows = [
        (
            p["node"],
            str(p["files"]),
            format_bytes(p["bytes"]),
            format_time(p["recorded_at"]),
            " ".join(f"{tier}={t['state']}" for tier, t in p["tiers"].items()),
        )
        for p in parts
    ]
    lines = ["", *table(("NODE", "FILES", "SIZE", "RECORDED (UTC)", "PARTS ON TIERS"), rows, right=(1, 2))]
    if missing is not None:
        lines += ["", f"waiting since {format_time(checkpoint.get('waiting_since'))} UTC; missing:"]
        if missing["file_count"]:
            shown = ", ".join(missing["files"][:10])
            more = f" and {missing['file_count'] - 10} more" if missing["file_count"] > 10 else ""
            lines.append(f"  {missing['file_count']} files: {shown}{more}")
        if missing["rank_count"]:
            lines.append(f"  {missing['rank_count']} ranks: {', '.join(map(str, missing['ranks'][:20]))}")
        if missing["nodes"]:
            heard = ", ".join(missing["nodes_heard"]) or "none"
            lines.append(
                f"  {missing['nodes']} of {missing['nodes_expected']} nodes' parts (heard from: {heard})"
            )
        if missing.get("marker"):
            lines.append("  the format's completion marker (no node has seen the step complete yet)")
    return lines
