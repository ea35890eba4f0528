"""A stopped test server's data goes in a process nobody waits for, out of sight at once."""

from __future__ import annotations

import time
from pathlib import Path

from tests.fixtures.pgserver import remove_in_background


def test_the_tree_is_out_of_the_way_at_once_and_then_gone(tmp_path: Path) -> None:
    tree = tmp_path / "tierd-pg-x"
    for db in range(20):
        (tree / "data" / "base" / str(db)).mkdir(parents=True)
        for rel in range(50):
            (tree / "data" / "base" / str(db) / str(rel)).write_bytes(b"\0" * 8192)

    remove_in_background(tree)

    assert not tree.exists()
    deadline = time.monotonic() + 60
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.iterdir()) == []
