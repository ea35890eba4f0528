"""The README's "Five minutes with curl", run as written: its shell blocks, in order, by bash.

Only the port changes: in the commands and in a copy of ``config.example.yaml``, which keeps
its relative ``var/`` paths (the blocks run in the copy's directory, as they do in a checkout).
The ``make run`` block is the Makefile's ``run`` recipe, run here (its last command, ``tierd
run``, as a daemon this test can stop); ``.venv/bin/tierd`` runs this tree's tierd. Every
block must exit 0 (``bash -e -o pipefail``) and print what its comments show. A block that
lands a ``.metadata`` must see its step recorded within ``DEADLINE`` (far under the example's
``reconcile_interval_seconds: 300``, which used to be the only thing that recorded the README's
hand-made step), then verified on every tier (complete, when it was announced first) as the
text says, before the next block runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import http
from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Five minutes with curl"
EXAMPLE_LISTEN = "127.0.0.1:8470"
#: From a marker landing to its step in the catalog (the hand-made one settles for 10 s first).
DEADLINE = 30.0
#: Values a reader's output differs in from the README's (the host name).
HOST_SPECIFIC = frozenset({"node"})
_MARKED = re.compile(
    r"checkpoints/(?P<run>[\w-]+)/step_(?P<step>\d+)\n.*mv \$d/\.metadata\.tmp \$d/\.metadata", re.S
)
_PAIR = re.compile(r'"(\w+)": "([^"]*)"')


def make_run() -> list[str]:
    """The commands of the Makefile's ``run`` recipe, with its variables' defaults filled in."""
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("\nrun:") + 1 :].split("\n\n", 1)[0].splitlines()[1:]
    commands = [line.strip() for line in recipe if not line.strip().startswith("#")]
    return [c.replace("$(BIN)", ".venv/bin").replace("$(CONFIG)", "config.example.yaml") for c in commands]


def walkthrough() -> list[str]:
    """The ``sh`` blocks of the README's walk-through section, in order."""
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"^```sh\n(.*?)^```", text[start:end], flags=re.S | re.M)


@dataclass
class Checkout:
    """A newcomer's checkout: the example config, its ``var/``, and the daemon ``make run`` starts."""

    root: Path
    port: int
    daemon: Daemon

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bash(self, block: str) -> str:
        """Run ``block`` with only the port changed; its standard output (fails on any error)."""
        script = block.replace(EXAMPLE_LISTEN, f"127.0.0.1:{self.port}")
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (
            f"{block}\nexit {done.returncode}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
        )
        return done.stdout

    def step(self, run: str, step: int) -> dict[str, Any] | None:
        page = http.get(f"{self.url}/v1/checkpoints", params={"run": run}, timeout=10).json()
        return next((c for c in page["items"] if c["step"] == step), None)

    def wait(self, done: Callable[[], bool], since: float, seconds: float, what: str) -> None:
        """Poll ``done`` until ``seconds`` after ``since``; fail naming ``what``, with the daemon's log."""
        while not done():
            if time.monotonic() - since > seconds:
                raise AssertionError(f"{what}: not within {seconds:g}s\n{self.daemon.tail()}")
            time.sleep(0.2)

    def deferrals(self, path: str) -> list[dict[str, Any]]:
        return [
            e for e in self.daemon.events() if e.get("event") == "checkpoint_deferred" and e["path"] == path
        ]


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Checkout]:
    example = (ROOT / "config.example.yaml").read_text()
    assert EXAMPLE_LISTEN in example
    port = free_port()
    (tmp_path / "config.example.yaml").write_text(example.replace(EXAMPLE_LISTEN, f"127.0.0.1:{port}"))
    tierd = tmp_path / ".venv" / "bin" / "tierd"
    tierd.parent.mkdir(parents=True)
    tierd.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tierd "$@"\n')
    tierd.chmod(0o755)
    *before, last = make_run()
    assert last == "exec .venv/bin/tierd run --config config.example.yaml"  # the daemon started below
    for command in before:  # the tiers' directories, the catalog's migration
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
    # `make run` execs .venv/bin/tierd, which is `python -m tierd`: the entry point itself.
    daemon = Daemon(tmp_path / "config.example.yaml", tmp_path / "daemon.log", exec=True)
    daemon.start()
    made = Checkout(tmp_path, port, daemon)
    try:
        daemon.wait_ready(60)
        yield made
    finally:
        daemon.stop()


def printed_json(out: str) -> list[Any]:
    """Every JSON object or array in ``out``, in order (curl prints them back to back)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := _next_open(out, at)) >= 0:
        try:
            value, at = decoder.raw_decode(out, at)
        except ValueError:
            at += 1
            continue
        found.append(value)
    return found


def _next_open(text: str, start: int) -> int:
    hits = [i for i in (text.find("{", start), text.find("[", start)) if i >= 0]
    return min(hits, default=-1)


def check_shown(block: str, out: str) -> int:
    """What ``block``'s comments show is in ``out``: whole-line JSON, table rows, inline ``"k": "v"``.

    Returns how many things it checked.
    """
    checked = 0
    objects = [o for o in printed_json(out) if isinstance(o, dict)]
    rows = {" ".join(line.split()) for line in out.splitlines()}
    for line in block.splitlines():
        text = line.strip()
        if text.startswith("# "):
            shown = text[2:]
            try:
                wanted = json.loads(shown)
            except ValueError:
                assert " ".join(shown.split()) in rows, f"the README shows {shown!r}; printed:\n{out}"
                checked += 1
                continue
            same = {k: v for k, v in wanted.items() if k not in HOST_SPECIFIC}
            assert any(same.items() <= o.items() for o in objects), (
                f"the README shows {shown}; printed:\n{out}"
            )
            checked += 1
        elif "  # " in line:
            for key, value in _PAIR.findall(line.split("  # ", 1)[1]):
                assert any(o.get(key) == value for o in objects), (
                    f'the README shows "{key}": "{value}"; printed:\n{out}'
                )
                checked += 1
    return checked


def _state(checkout: Checkout, run: str, step: int, done: Callable[[dict[str, Any]], bool]) -> bool:
    found = checkout.step(run, step)
    return found is not None and done(found)


def _exists(found: dict[str, Any]) -> bool:
    return True


def _complete(found: dict[str, Any]) -> bool:
    return bool(found["state"] == "complete")


def _all_verified(found: dict[str, Any]) -> bool:
    return bool(found["replicas"]) and all(r["state"] == "verified" for r in found["replicas"])


def check_marked(checkout: Checkout, block: str, landed: float) -> None:
    """The step whose ``.metadata`` ``block`` landed goes where the README says it goes."""
    marked = _MARKED.search(block)
    if marked is None:
        return
    run, step = marked["run"], int(marked["step"])
    announced = "-X POST" in block  # waiting until its marker landed: then complete
    what = f"{run} step {step} {'complete' if announced else 'recorded'} after its .metadata landed"
    checkout.wait(
        partial(_state, checkout, run, step, _complete if announced else _exists), landed, DEADLINE, what
    )
    if not announced:
        what = f"{run} step {step} verified on every tier"
        checkout.wait(partial(_state, checkout, run, step, _all_verified), landed, 2 * DEADLINE, what)
    deferred = checkout.deferrals(f"{run}/step_{step}")
    assert len(deferred) == 1, deferred  # the hand-made .metadata settles: logged why, once


def test_the_readme_walk_through_works_as_written(checkout: Checkout) -> None:
    first, *blocks = walkthrough()
    assert first.strip() == "make run"  # the daemon the fixture started, as `make run` does
    assert len(blocks) >= 5
    shown = 0
    for block in blocks:
        out = checkout.bash(block)
        check_marked(checkout, block, time.monotonic())
        shown += check_shown(block, out)
    assert shown >= 7  # ready, empty list, `tierd ls` header and row, waiting, complete, 404
    assert checkout.daemon.terminate(60) == 0  # Ctrl-C or SIGTERM: "exits 0"
