"""``tierd show`` of a step spanning nodes: its parts, and what a waiting step is missing."""

from __future__ import annotations

from tierd.cli.display import parts_lines

PART = {"files": 2, "bytes": 2048, "recorded_at": "2026-01-01T00:05:00Z"}


def test_a_waiting_step_shows_each_part_and_what_is_missing() -> None:
    body = {
        "parts": [
            {**PART, "node": "n0", "tiers": {"nvme": {"state": "verified"}, "pfs": {"state": "pending"}}},
            {**PART, "node": "n1", "tiers": {"nvme": {"state": "verified"}, "pfs": {"state": "copying"}}},
        ],
        "waiting_since": "2026-01-01T00:05:00Z",
        "missing": {
            "files": ["__2_0.distcp"],
            "file_count": 1,
            "ranks": [2],
            "rank_count": 1,
            "nodes": 1,
            "nodes_expected": 3,
            "nodes_heard": ["n0", "n1"],
        },
    }
    assert parts_lines(body) == [
        "",
        "NODE  FILES    SIZE  RECORDED (UTC)       PARTS ON TIERS",
        "n0        2  2.0 kB  2026-01-01 00:05:00  nvme=verified pfs=pending",
        "n1        2  2.0 kB  2026-01-01 00:05:00  nvme=verified pfs=copying",
        "",
        "waiting since 2026-01-01 00:05:00 UTC; missing:",
        "  1 files: __2_0.distcp",
        "  1 ranks: 2",
        "  1 of 3 nodes' parts (heard from: n0, n1)",
    ]


def test_a_complete_single_node_step_shows_no_parts_table() -> None:
    body = {"parts": [{**PART, "node": "n0", "tiers": {}}], "missing": None}
    assert parts_lines(body) == []
