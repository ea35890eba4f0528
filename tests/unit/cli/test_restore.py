"""``tierd restore`` and ``tierd jobs`` against a real API with a restore service behind it."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.fixtures.world import posix_tier
from tests.unit.restore.harness import FAST, RestoreWorld
from tierd.api.app import create_app
from tierd.api.server import ApiService
from tierd.cli.main import main
from tierd.cli.restores import _restore_lines
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context
from tierd.daemon.restore.service import RestoreService

STEP = {"__0_0.distcp": os.urandom(40_000), "__1_0.distcp": os.urandom(30_000), ".metadata": b"m" * 10}


@pytest.fixture
async def served(tmp_path: Path, sqlite_db: Database) -> AsyncIterator[tuple[RestoreWorld, str]]:
    lab = RestoreWorld.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    ctx = Context(config=lab.world.config, db=sqlite_db)
    service = RestoreService(ctx, lab.world.backends, options=FAST)
    await service.start()
    api = ApiService(create_app(ctx), "127.0.0.1", 0)
    await api.start()
    yield lab, f"http://127.0.0.1:{api.port}"
    await api.stop(5)
    await service.stop(5)


async def tierd(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with capture_logs():  # the service's log lines stay out of the command's output
        code = await asyncio.to_thread(main, [*argv, "--url", url])
    out, err = capsys.readouterr()
    return code, out, err


async def test_restore_by_run_and_step_waits_and_prints_json(
    served: tuple[RestoreWorld, str], capsys: pytest.CaptureFixture[str]
) -> None:
    lab, url = served
    await lab.add(1, {"nvme": "deleted", "pfs": "verified"}, STEP)
    target = lab.root / "restores" / "cli"
    code, out, _ = await tierd(
        capsys, url, "restore", "demo:1", "--to", str(target), "--ranks", "1", "--wait", "--json"
    )
    assert code == 0
    body = json.loads(out)
    assert (body["state"], body["files_done"], body["source_tier"]) == ("done", 2, "pfs")
    assert sorted(p.name for p in target.iterdir()) == [".metadata", "__1_0.distcp"]


async def test_restore_latest_human_line_and_jobs(
    served: tuple[RestoreWorld, str], capsys: pytest.CaptureFixture[str]
) -> None:
    lab, url = served
    await lab.add(2, {"nvme": "deleted", "pfs": "verified"}, STEP)
    code, out, _ = await tierd(capsys, url, "restore", "--latest", "demo", "--to-tier0", "--wait")
    assert code == 0
    assert out.startswith("restore 1 done: 100%")
    assert "(from pfs)" in out
    assert lab.world.states(1)["nvme"] == "verified"
    code, out, _ = await tierd(capsys, url, "jobs")
    assert (code, out.splitlines()[0]) == (0, "copies: 0")
    assert "restores: 0" in out


async def test_usage_errors_and_refusals(
    served: tuple[RestoreWorld, str], capsys: pytest.CaptureFixture[str]
) -> None:
    lab, url = served
    await lab.add(3, {"nvme": "deleted", "pfs": "verified"}, STEP)
    code, _, err = await tierd(capsys, url, "restore", "--to", "/x")
    assert (code, err.strip()) == (2, "tierd restore: name the checkpoint: ID, RUN:STEP or --latest RUN")
    code, _, err = await tierd(capsys, url, "restore", "1", "--to", "/etc/tierd-restore")
    assert code == 1
    assert "HTTP 422" in err
    assert "outside the allowed roots" in err
    with pytest.raises(SystemExit):
        main(["restore", "1", "--to", "/x", "--ranks", "3-1"])


def test_a_restore_read_from_several_sources_says_what_each_gave() -> None:
    done = {
        "id": 4,
        "state": "done",
        "bytes_done": 10,
        "bytes_total": 10,
        "files_done": 4,
        "files_total": 4,
        "rate_bytes_per_second": None,
        "eta_seconds": None,
        "target": "/restores/r4",
        "source_tier": "peer:node1",
        "fallbacks": [],
        "error": None,
    }
    several = _restore_lines(done | {"read_from": {"peer:node1": 3, "peer:node0": 1}})
    assert several[0].endswith(" -> /restores/r4 (from peer:node1 3 files, peer:node0 1 file)"), several
    assert _restore_lines(done | {"read_from": {"peer:node1": 4}})[0].endswith(" (from peer:node1)")
    assert _restore_lines(done)[0].endswith(" (from peer:node1)")  # an older daemon's answer
