"""A kill -9 soak: the daemon killed at random moments, again and again, while steps move down
four tiers (POSIX, POSIX, S3 on moto's server, S3 on ``rclone serve s3``).

Training keeps saving: a new step appears every few restarts, so every run has work in
flight. After the last kill the daemon finishes, and then: every step is verified on every
tier, every byte read back (``open()``, boto3) hashes as tier 0's does with an independent
hash (SHA-256), no temporary file or open multipart upload is left, and the catalog holds no
duplicate row. A watcher thread measures how long each crash's debris lived: it must go
when the hop resumes, not after the janitor's 24 hours.

The seed is printed; ``TIERD_SOAK_SEED=<seed>`` replays a run's kill moments.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqlalchemy import select

from tests.fixtures.daemon import Daemon
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import (
    MiB,
    audit,
    config_dict,
    record_checkpoint,
    tier_dict,
    uploads,
    wait_for,
    write_files,
)
from tierd.config import Config, load_config
from tierd.daemon.backends.posix.backend import TEMP_MARK, is_temp_name
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, File, Job, Replica

KILLS = 50
NEW_STEP_EVERY = 4  # restarts between two new steps
CAPS = {"pfs": 12 * MiB, "s3": 8 * MiB, "dr": 8 * MiB}  # bytes/s: hops last long enough to be cut
POLL = 0.2  # seconds between the watcher's looks at the tiers
Item = tuple[str, str, str]  # (tier, temporary file or UploadId, the relpath it was for)


def step_sizes(step: int) -> dict[str, int]:
    """Small files, a medium one, every third step a two-part multipart one; the marker last."""
    sizes = {f"small/f{i}.bin": 2048 + 4096 * i + step for i in range(6)}
    sizes["shard0.distcp"] = 3 * MiB // 2 + step
    if step % 3 == 0:
        sizes["big.distcp"] = 7 * MiB + step  # parts of 5 MiB + 2 MiB
    sizes[".metadata"] = 4096
    return sizes


@dataclass
class Tiers:
    """Where the soak's tiers keep their bytes, and how to look at them from outside the daemon."""

    pfs: Path
    s3: tuple[S3Server, str]
    dr: tuple[S3Server, str]

    def leftovers(self) -> set[Item]:
        """Every temporary file on pfs and every open multipart upload on either store."""
        found = {
            ("pfs", str(p), str(p.parent.relative_to(self.pfs) / p.name[1 : p.name.index(TEMP_MARK)]))
            for p in self.pfs.rglob("*")
            if is_temp_name(p.name)
        }
        for tier, (server, bucket) in (("s3", self.s3), ("dr", self.dr)):
            found |= {(tier, upload_id, key) for key, upload_id in _open_uploads(server, bucket)}
        return found

    def digests(self) -> dict[str, dict[str, str]]:
        """SHA-256 of every object under its final name, per tier, read back independently."""
        pfs = {
            str(p.relative_to(self.pfs)): _sha256(p.read_bytes())
            for p in self.pfs.rglob("*")
            if p.is_file() and not is_temp_name(p.name)
        }
        out = {"pfs": pfs}
        for tier, (server, bucket) in (("s3", self.s3), ("dr", self.dr)):
            client = server.client()
            keys = [o["Key"] for o in _all_objects(client, bucket)]
            out[tier] = {k: _sha256(client.get_object(Bucket=bucket, Key=k)["Body"].read()) for k in keys}
        return out


def _open_uploads(server: S3Server, bucket: str) -> list[tuple[str, str]]:
    """(key, UploadId) of every open multipart upload in the bucket."""
    try:
        listing = server.client().list_multipart_uploads(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "NoSuchUpload":  # rclone serve s3, when there are none
            return []
        raise
    return [(u["Key"], u["UploadId"]) for u in listing.get("Uploads", [])]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _all_objects(client: Any, bucket: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        objects += page.get("Contents", [])
    return objects


@dataclass
class DebrisWatch:
    """A thread that looks at the tiers every POLL seconds and notes when each leftover went."""

    look: Callable[[], set[Item]]
    gone_at: dict[Item, float] = field(default_factory=dict)
    kills: list[tuple[float, set[Item]]] = field(default_factory=list)
    resumable_seen: set[str] = field(default_factory=set)  # recorded UploadIds found at kills
    _seen: set[Item] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="debris-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.observe()

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            self.observe()

    def observe(self) -> set[Item]:
        """Look now; an item seen before and missing now is gone (first time only)."""
        now_items = self.look()
        now = time.time()  # wall clock: compared with the daemon's log timestamps
        with self._lock:
            for item in self._seen - now_items:
                self.gone_at.setdefault(item, now)
            self._seen |= now_items
        return now_items

    def killed(self, resumable: set[str]) -> set[Item]:
        """Right after a kill: the new debris the dead daemon left, noted with the time.

        An upload the catalog records (``resumable``, UploadIds) is not debris: the next run
        resumes it, and it may rightly stay open across many runs until its last part is sent.
        """
        at = time.time()
        earlier = {item for _, left in self.kills for item in left}
        left = {item for item in self.observe() - earlier if item[1] not in resumable}
        self.kills.append((at, left))
        self.resumable_seen |= resumable
        return left

    def lifetimes(self) -> list[float]:
        """Per leftover found after a kill: seconds from that kill until it was seen gone."""
        return [self.gone_at[item] - at for at, left in self.kills for item in left if item in self.gone_at]

    def restarts_survived(self) -> int:
        """The most later kills any leftover was still there for (0: gone in the next run)."""
        survived = 0
        for at, left in self.kills:
            for item in left:
                gone = self.gone_at.get(item, float("inf"))
                survived = max(survived, sum(1 for later, _ in self.kills if at < later < gone))
        return survived

    def never_gone(self) -> set[Item]:
        return {item for _, left in self.kills for item in left} - set(self.gone_at)


def _run_briefly(daemon: Daemon, rng: random.Random, copying: Callable[[], bool]) -> str:
    """Start the daemon and kill -9 it at a random moment; returns when ("startup", "running", "copying").

    One kill in four lands in start-up (catalog checked, jobs requeued, tiers probed). Of the
    others, half land up to 1 s after the run's first hop started (or 5 s after start if none
    did), and half are aimed: within 0.1 s of the catalog showing a replica being copied, so
    that enough kills cut a hop whatever the machine's load (a loaded machine stretched the
    start-up until the blind ones mostly fell between hops).
    """
    daemon.start()
    if rng.random() < 0.25:
        time.sleep(rng.uniform(0.0, 0.5))
        moment = "startup"
    else:
        _wait(lambda: daemon.logged("hop_started", run=daemon.runs) or not daemon.alive(), 5)
        assert daemon.alive(), daemon.tail()
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0.0, 1.0))
            moment = "running"
        else:
            _wait(lambda: copying() or not daemon.alive(), 3)
            time.sleep(rng.uniform(0.0, 0.1))
            moment = "copying"
    daemon.kill()
    return moment


def _wait(done: Callable[[], object], seconds: float) -> None:
    """Poll ``done`` every 20 ms until it is true or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


def _hop_starts(*logs: Path) -> dict[tuple[int, str], list[float]]:
    """When each hop (checkpoint id, destination tier) started, from the daemons' JSON logs."""
    starts: dict[tuple[int, str], list[float]] = defaultdict(list)
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if '"hop_started"' in line:
                event = json.loads(line)
                at = datetime.fromisoformat(event["timestamp"]).timestamp()
                starts[(event["checkpoint"], event["dst"])].append(at)
    return starts


def _removal_after_hop_start(
    watch: DebrisWatch, starts: dict[tuple[int, str], list[float]], cids: dict[str, int]
) -> tuple[list[float], int]:
    """Seconds from the start of the hop that removed each leftover until it was seen gone, and
    the most starts of its hop a leftover outlived (a run killed between a hop's start and
    its clean-up leaves it to the next). Leftovers gone with no start of their hop between
    (the janitor aborts moto's uploads at start-up: moto says they began in 2010) count in neither.
    """
    delays, outlived = [], 0
    for at, left in watch.kills:
        for item in left:
            tier, _, relpath = item
            gone = watch.gone_at.get(item)
            if gone is None:
                continue
            hop = (cids[relpath.split("/")[1]], tier)
            between = [t for t in starts.get(hop, []) if at < t < gone]
            if between:
                delays.append(gone - max(between))
                outlived = max(outlived, len(between) - 1)
    return delays, outlived


def _states(db: Database) -> Counter[str]:
    with db.read_session() as s:
        return Counter(s.scalars(select(Replica.state)))


def _duplicates(db: Database) -> dict[str, list[Any]]:
    """Catalog rows that should be unique but are not, by table (empty when all is well)."""
    with db.read_session() as s:
        keys: dict[str, list[Any]] = {
            "checkpoints": [(c.run_id, c.step) for c in s.scalars(select(Checkpoint))],
            "files": [(f.checkpoint_id, f.relpath) for f in s.scalars(select(File))],
            "replicas": [(r.checkpoint_id, r.tier) for r in s.scalars(select(Replica))],
            "jobs": [(j.checkpoint_id, j.dst_tier) for j in s.scalars(select(Job))],
        }
    keys["verified_audits"] = [(e.checkpoint_id, e.tier) for e in audit(db) if e.action == "replica_verified"]
    found = {name: [k for k, n in Counter(values).items() if n > 1] for name, values in keys.items()}
    return {name: dups for name, dups in found.items() if dups}


@dataclass
class Soak:
    """The soak's world: the catalog, the tiers, the steps written so far, the daemon runs."""

    tmp_path: Path
    db: Database
    config: Config
    where: Tiers
    forked: Daemon  # forked from the zygote: fifty start-ups without fifty imports
    rng: random.Random
    expected: dict[str, str] = field(default_factory=dict)  # relpath -> SHA-256 on tier 0
    steps: list[int] = field(default_factory=list)
    cids: dict[str, int] = field(default_factory=dict)  # "step<N>" -> checkpoint id
    moments: Counter[str] = field(default_factory=Counter)
    mid_hop: int = 0

    def new_step(self) -> None:
        """Training saved another step: its files on tier 0, recorded complete."""
        step = len(self.steps) + 1
        self.steps.append(step)
        root = self.tmp_path / "nvme" / "demo" / f"step{step}"
        data = write_files(root, step_sizes(step), seed=step)
        self.expected.update({f"demo/step{step}/{name}": _sha256(b) for name, b in data.items()})
        self.cids[f"step{step}"] = record_checkpoint(self.db, self.config, "demo", step, f"demo/step{step}")

    def kill_repeatedly(self, watch: DebrisWatch) -> None:
        """KILLS runs, each killed at a random moment; a new step every NEW_STEP_EVERY runs."""
        for kill in range(KILLS):
            if kill % NEW_STEP_EVERY == 0:
                self.new_step()
            self.moments[_run_briefly(self.forked, self.rng, self.copying)] += 1
            watch.killed(resumable={upload_id for _, _, upload_id, _ in uploads(self.db)})
            self.mid_hop += _states(self.db)["copying"] > 0

    def copying(self) -> bool:
        """Whether the catalog shows a replica being copied."""
        return _states(self.db)["copying"] > 0

    def check_end_state(self) -> None:
        """Every step verified everywhere with tier 0's bytes; no debris; no duplicate row."""
        db = self.db
        assert _states(db) == {"verified": len(self.steps) * len(self.config.tiers)}
        expected = self.expected
        assert self.where.digests() == {"pfs": expected, "s3": expected, "dr": expected}
        assert self.where.leftovers() == set()
        assert uploads(db) == []  # no upload the catalog still means to resume
        assert _duplicates(db) == {}
        with db.read_session() as s:
            assert set(s.scalars(select(Job.state))) == {"done"}


def _make_soak(tmp_path: Path, moto: S3Server, rclone: S3Server, seed: int) -> tuple[Soak, Daemon]:
    """The four tiers, a migrated catalog, and both ways of running the daemon on them."""
    s3 = moto.new_tier("s3", bandwidth_limit=CAPS["s3"])
    dr = rclone.new_tier("dr", bandwidth_limit=CAPS["dr"])
    for name in ("nvme", "pfs"):
        (tmp_path / name).mkdir()
    tiers: list[dict[str, Any]] = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs"), "bandwidth_limit": CAPS["pfs"]},
        tier_dict(s3),
        tier_dict(dr),
    ]
    daemon = Daemon.prepare(tmp_path, config_dict(tmp_path, tiers), exec=True)
    config = load_config(daemon.config_path)
    soak = Soak(
        tmp_path,
        Database(config.catalog.url),
        config,
        Tiers(tmp_path / "pfs", (moto, s3.bucket), (rclone, dr.bucket)),
        Daemon(daemon.config_path, tmp_path / "forked.log"),
        random.Random(seed),
    )
    return soak, daemon


@pytest.mark.slow
@pytest.mark.timeout(600)  # two minutes alone; it runs beside the rest of the suite
def test_kill_9_soak_across_four_tiers(
    tmp_path: Path, moto_server: S3Server, rclone_server: S3Server
) -> None:
    seed = int(os.environ.get("TIERD_SOAK_SEED") or secrets.randbits(32))
    print(f"kill -9 soak seed: {seed} (TIERD_SOAK_SEED={seed} replays it)")
    soak, daemon = _make_soak(tmp_path, moto_server, rclone_server, seed)
    watch = DebrisWatch(soak.where.leftovers)
    started = time.monotonic()
    watch.start()
    try:
        soak.kill_repeatedly(watch)
        soak_seconds = time.monotonic() - started
        daemon.start()  # the last run: the real entry point, stopped gracefully
        wait_for(lambda: any(e["event"] == "ready" for e in daemon.events(1)), 60, "the last run to be ready")
        replicas = len(soak.steps) * len(soak.config.tiers)
        wait_for(lambda: _states(soak.db)["verified"] == replicas, 120, "every step verified on every tier")
        assert daemon.terminate(30) == 0, daemon.tail()
    finally:
        watch.stop()
        soak.forked.stop()
        daemon.stop()
    figures = _figures(soak, watch, seed, soak_seconds, daemon.log_path)
    print("kill -9 soak:", json.dumps(figures))
    soak.check_end_state()
    assert watch.never_gone() == set()
    assert soak.mid_hop >= KILLS * 2 // 5, f"too few kills landed mid-hop: {figures}"


def _figures(
    soak: Soak, watch: DebrisWatch, seed: int, soak_seconds: float, last_log: Path
) -> dict[str, Any]:
    """What the closing note reports: kills, where they landed, how long their debris lived."""
    lifetimes = watch.lifetimes()
    delays, outlived = _removal_after_hop_start(watch, _hop_starts(soak.forked.log_path, last_log), soak.cids)
    return {
        "seed": seed,
        "kills": KILLS,
        "kill_moments": dict(soak.moments),
        "kills_mid_hop": soak.mid_hop,
        "kills_leaving_debris": sum(1 for _, left in watch.kills if left),
        "leftovers": len(lifetimes),
        "recorded_uploads_resumed": len(watch.resumable_seen),
        "debris_lifetime_s": {
            "median": round(statistics.median(lifetimes), 2) if lifetimes else None,
            "p90": round(statistics.quantiles(lifetimes, n=10)[-1], 2) if len(lifetimes) > 1 else None,
            "max": round(max(lifetimes), 2) if lifetimes else None,
        },
        "restarts_survived_max": watch.restarts_survived(),
        "gone_after_the_hop_start_that_removed_it_s": {
            "median": round(statistics.median(delays), 2) if delays else None,
            "max": round(max(delays), 2) if delays else None,
            "removed_by_a_hop": len(delays),
        },
        "hop_starts_outlived_max": outlived,
        "soak_seconds": round(soak_seconds, 1),
        "steps": len(soak.steps),
    }
