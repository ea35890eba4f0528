"""The API under clients that give up (issue 23, item 8), against the real daemon over HTTP.

Fifty clients with a 1 s timeout, each sending the next request as soon as the last was
answered or given up on. Before the daemon bounded its API work, their abandoned requests
were all still worked on: a second round got no answer at all, and then the catalog's
connection pool ran dry (``QueuePool limit ... reached``). Each round here runs for a few
seconds; what is asserted is what the clients got, never how fast.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from tests.fixtures.daemon import Daemon
from tests.integration.daemon_helpers import config_dict
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, File, Replica, Run, utcnow

PROBLEM = "application/problem+json"
CLIENTS = 50
CLIENT_TIMEOUT = 1.0
ROUND_SECONDS = 6.0
CHECKPOINTS = 100
FILES = 50


@dataclass
class Round:
    """What the clients of one round got."""

    statuses: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    odd: list[str] = field(default_factory=list)  # answers that are neither a 200 nor a proper 503
    answered_clients: set[int] = field(default_factory=set)

    @property
    def answers(self) -> int:
        return sum(self.statuses.values())


def _seed(db: Database) -> None:
    """Checkpoints of another node, verified on both tiers: something to list, nothing to copy."""
    created = utcnow() - timedelta(days=1)
    with db.session() as session:
        run = Run(name="dashboard")
        for index in range(CHECKPOINTS):
            path = f"dashboard/step_{index:06d}"
            ckpt = Checkpoint(
                run=run,
                step=index,
                path=path,
                format="dcp",
                node="trainer",
                created_at=created,
                file_count=FILES,
            )
            for number in range(FILES):
                ckpt.files.append(
                    File(
                        relpath=f"{path}/__{number}_0.distcp", size=1, checksum_algo="crc64nvme", checksum="A"
                    )
                )
            for tier_index, tier in enumerate(("nvme", "pfs")):
                ckpt.replicas.append(
                    Replica(tier=tier, tier_index=tier_index, state="verified", location=path)
                )
            session.add(ckpt)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Daemon, str]]:
    tiers = []
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
        tiers.append({"name": name, "kind": "posix", "path": str(tmp_path / name)})
    data = config_dict(tmp_path, tiers)
    proc = Daemon.prepare(tmp_path, data)
    db = Database(data["catalog"]["url"])
    try:
        _seed(db)
    finally:
        db.dispose()
    proc.start()
    try:
        proc.wait_ready(60)
        yield proc, proc.url
    finally:
        proc.stop()


async def _client(number: int, http: httpx.AsyncClient, until: float, seen: Round) -> None:
    """Hammer the list and detail calls until ``until``; honour a 503's Retry-After."""
    paths = ["/v1/checkpoints", f"/v1/checkpoints/{number % CHECKPOINTS + 1}"]
    async with http:
        turn = 0
        while time.monotonic() < until:
            turn ^= 1
            try:
                async with asyncio.timeout(CLIENT_TIMEOUT):
                    answer = await http.get(paths[turn])
            except (TimeoutError, httpx.TimeoutException):
                seen.timeouts += 1
                continue
            except httpx.HTTPError as exc:
                seen.errors[type(exc).__name__] += 1
                await asyncio.sleep(0.1)
                continue
            seen.statuses[answer.status_code] += 1
            seen.answered_clients.add(number)
            if answer.status_code == 503:
                retry_after = answer.headers.get("retry-after", "")
                if answer.headers.get("content-type") != PROBLEM or not retry_after.isdigit():
                    seen.odd.append(
                        f"503 {answer.headers.get('content-type')} {retry_after!r}: {answer.text[:200]}"
                    )
                    continue
                await asyncio.sleep(min(int(retry_after), 2))
            elif answer.status_code != 200:
                seen.odd.append(f"{answer.status_code}: {answer.text[:200]}")


async def _round(base: str) -> Round:
    # Made before the clock starts, sharing one TLS context (unused, but each client would
    # otherwise load the CA bundle: 50 of those starved the clients' own event loop).
    tls = ssl.create_default_context()
    clients = [httpx.AsyncClient(base_url=base, timeout=CLIENT_TIMEOUT, verify=tls) for _ in range(CLIENTS)]
    seen = Round()
    until = time.monotonic() + ROUND_SECONDS
    await asyncio.gather(*(_client(n, http, until, seen) for n, http in enumerate(clients)))
    return seen


async def test_clients_that_give_up_do_not_stall_the_api(daemon: tuple[Daemon, str]) -> None:
    proc, base = daemon
    first = await _round(base)
    second = await _round(base)
    summary = f"first round: {first}; second round: {second}"
    assert second.answers > 0, f"the second round got no answer at all: {summary}"
    assert first.odd + second.odd == [], summary
    assert first.errors + second.errors == Counter(), summary
    assert set(second.statuses) <= {200, 503}, summary
    # Most clients got an answer of some kind (a 200, or a 503 saying when to come back).
    assert len(second.answered_clients) >= CLIENTS // 2, summary
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        after = await http.get("/v1/checkpoints")
    assert after.status_code == 200, after.text
    assert after.json()["total"] == CHECKPOINTS
    assert proc.alive()
    log = proc.log_path.read_text(errors="replace")
    assert "QueuePool limit" not in log
    assert "api_unhandled" not in log
