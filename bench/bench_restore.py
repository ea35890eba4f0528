"""A real restore job from the S3 tier against ``s5cmd cp`` + ``sync`` of the same objects.

tierd's side is the real daemon (``python -m tierd run``, tiers ``nvme`` (posix) and ``s3`` on
one local ``rclone serve s3``, every setting at its default) holding the checkpoint only on
``s3``: it is uploaded once with s5cmd, recorded as detection records it, and its tier-0
replica is marked deleted. Each run asks ``POST /v1/restores`` for it into a fresh directory
and polls ``GET /v1/restores/{id}`` every 100 ms until ``done``: the time is the caller's, from
the request to the answer that says done (claim, every file read, verified against its
first-sight CRC64NVME, written under a temporary name, made durable and renamed, the marker
last, the job's end committed). Its CPU seconds are the daemon process's during that time
(``/proc/<pid>/stat``; the daemon is otherwise idle: no watch, nothing to copy).

The baseline is ``s5cmd cp 's3://BUCKET/job/step_1/*' DST/`` then ``sync`` (s5cmd neither
checks a checksum nor fsyncs), timed together; s5cmd's own time is reported beside. One
untimed run of each side comes first (the first of either after the upload ran ~1.5x
slower). Before each run: ``sync``, and rclone's object files evicted from the page cache
(cold) or read into it (warm). The sides run in turn, the order rotated each round; medians
are reported. Goal: ratio <= 1.0. With ``--against REV`` a second daemon, REV's, over a catalog
its own tierd wrote, serves the same restores in every round (``bench.sides``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.common import bench_root, emit, note, stop_process, vm_hwm_bytes
from bench.datasets import STEP_DIR, Dataset, make_big, make_small
from bench.harness import Settings, Timed, Trash, prepare_cache, sync, timed
from bench.results import RSS_GOAL, Cpu, Runs, interleaved
from bench.s3endpoint import S3Endpoint, rclone_s3, s5cmd_binary
from bench.sides import Side
from tests.fixtures.net import free_port

#: ``--against REV``: REV's daemon serves the same restores, in turn with this tree's and s5cmd.
AGAINST = True
ROUNDS = 3
SMALL_ROUNDS = 5
#: Polls of the restore: at every 10 ms, serving them was over a tenth of the daemon's CPU
#: during a 4 GiB restore (py-spy: the API's request gate alone 12%); s5cmd answers no poll.
POLL = 0.1
#: How long a daemon may take to answer /readyz: 60 s was too short above load 20.
START_SECONDS = 300
S5CMD = "s5cmd cp 's3://BUCKET/job/step_1/*' DST/ (defaults: --numworkers 256, --concurrency 5) then sync"


@dataclass
class Daemon:
    """The daemon serving restores, its API and its catalog."""

    proc: subprocess.Popen[bytes]
    base: str
    log: Path

    def cpu(self) -> Cpu:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        tick = os.sysconf("SC_CLK_TCK")
        return Cpu(int(fields[11]) / tick, int(fields[12]) / tick)

    def stop(self) -> None:
        stop_process(self.proc)


def _start(
    workdir: Path, s3: S3Endpoint, dataset: Dataset, bucket: str, restores: Path, side: Side
) -> Daemon:
    """A catalog holding the checkpoint on ``s3`` only, written by ``side``, and its daemon, ready."""
    workdir.mkdir(parents=True)
    data: dict[str, Any] = {
        "node": "bench",
        "catalog": {"url": f"sqlite:///{workdir / 'catalog.db'}"},
        "api": {"listen": f"127.0.0.1:{free_port()}"},
        "log": {"level": "info", "format": "json"},
        "tiers": [{"name": "nvme", "kind": "posix", "path": str(dataset.tier0)}, s3.tier("s3", bucket)],
        "restore": {"allowed_roots": [str(restores)]},
    }
    (workdir / "tierd.yaml").write_text(yaml.safe_dump(data))
    only_on = {"tier": "s3", "location": f"s3://{bucket}/{STEP_DIR}", "deleted": ["nvme"]}
    side.record(workdir / "catalog.db", data, {**dataset.record_spec(), "only_on": only_on})
    log = workdir / "daemon.log"
    proc = side.spawn([sys.executable, "-m", "tierd", "run", "--config", str(workdir / "tierd.yaml")], log)
    daemon = Daemon(proc, f"http://{data['api']['listen']}", log)
    deadline = time.monotonic() + START_SECONDS
    while not _ready(daemon.base):
        if proc.poll() is not None or time.monotonic() > deadline:
            daemon.stop()
            raise RuntimeError(f"the daemon did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return daemon


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _restore(daemon: Daemon, client: httpx.Client, target: Path) -> tuple[float, Cpu, dict[str, Any]]:
    """One restore job, from the request to the answer that says done."""
    before = daemon.cpu()
    started = time.perf_counter()
    answer = client.post("/v1/restores", json={"run": "bench", "step": 1, "target": str(target)})
    if answer.status_code != 202:
        raise RuntimeError(f"restore refused: {answer.status_code} {answer.text}")
    restore_id = answer.json()["id"]
    while True:
        body = client.get(f"/v1/restores/{restore_id}").json()
        if body["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(POLL)
    seconds = time.perf_counter() - started
    if body["state"] != "done":
        raise RuntimeError(f"restore {restore_id} ended {body['state']}: {body['error']}")
    return seconds, daemon.cpu() - before, body


def _in_daemon_seconds(log: Path) -> list[float]:
    """Each restore's time inside the daemon: its ``restore_started`` to its ``restore_done`` log line."""
    started: dict[int, datetime] = {}
    seconds = []
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        at = datetime.fromisoformat(event.get("timestamp", "1970-01-01T00:00:00Z"))
        if event.get("event") == "restore_started":
            started[event["restore"]] = at
        elif event.get("event") == "restore_done" and event["restore"] in started:
            seconds.append((at - started[event["restore"]]).total_seconds())
    return seconds


def _baseline(s3: S3Endpoint, bucket: str, target: Path, env: dict[str, str]) -> tuple[Timed, Timed]:
    """``s5cmd cp`` of the checkpoint's objects into ``target``, then ``sync``: each timed."""
    target.mkdir()
    copy = timed(
        [s5cmd_binary(), "--endpoint-url", s3.url, "cp", f"s3://{bucket}/{STEP_DIR}/*", f"{target}/"], env
    )
    return copy, timed(["sync"])


def _compare(base: Path, s3: S3Endpoint, dataset: Dataset, settings: Settings, rounds: int) -> None:
    bucket = s3.create_bucket(f"restore-{dataset.kind}")
    env = s3.s5cmd_env(base)
    timed(
        [s5cmd_binary(), "--endpoint-url", s3.url, "cp", f"{dataset.source}/*", f"s3://{bucket}/{STEP_DIR}/"],
        env,
    )
    sources = s3.object_paths(bucket)
    restores = base / "restores"
    restores.mkdir()
    trash = Trash(base / "trash", keep=dataset.kind == "small")
    runs = Runs(1.0, RSS_GOAL, settings.against)
    daemons: dict[str, Daemon] = {}
    clients: dict[str, httpx.Client] = {}
    s5cmd_alone: list[float] = []
    fallbacks = 0
    try:
        for side in settings.sides:
            workdir = base / f"daemon-{side.name}-{dataset.kind}"
            daemons[side.name] = _start(workdir, s3, dataset, bucket, restores, side)
        clients.update({name: httpx.Client(base_url=d.base, timeout=30) for name, d in daemons.items()})
        # Untimed, one of each: the first of either side after the upload ran ~1.5x slower.
        for name, daemon in daemons.items():
            _restore(daemon, clients[name], restores / f"warm-{name}")
        _baseline(s3, bucket, restores / "warm-s5cmd", env)
        for name in [*daemons, "s5cmd"]:
            trash.discard(restores / f"warm-{name}")
        for round_, name in interleaved(runs.contestants, rounds):
            target = restores / f"{name}-{round_}"
            sync()
            prepare_cache(sources, settings.cache)
            if name == "baseline":
                copy, flush = _baseline(s3, bucket, target, env)
                s5cmd_alone.append(copy.seconds)
                runs.add_baseline(Timed(copy.seconds + flush.seconds, copy.cpu, copy.peak_rss_bytes))
                both = f"s5cmd {copy.seconds:.2f}s + sync {flush.seconds:.2f}s"
                note(f"restore {dataset.kind} round {round_}: {both}")
            else:
                seconds, cpu, body = _restore(daemons[name], clients[name], target)
                peak = vm_hwm_bytes(daemons[name].proc.pid) or 0
                if name == "tierd":
                    fallbacks += len(body["fallbacks"])
                (runs.add_tierd if name == "tierd" else runs.add_against)(seconds, cpu, peak)
                note(f"restore {dataset.kind} round {round_}: {name} {seconds:.2f}s, CPU {cpu.total:.2f}s")
            count = sum(p.is_file() for p in target.rglob("*"))
            if count != len(dataset.files):
                raise RuntimeError(f"{name} restored {count} files, not {len(dataset.files)}")
            trash.discard(target)
    finally:
        for client in clients.values():
            client.close()
        for daemon in daemons.values():
            daemon.stop()
        trash.empty()
    daemon = daemons["tierd"]
    inside = _in_daemon_seconds(daemon.log)
    t, b = runs.medians
    emit(
        f"restore_s3_{dataset.kind}",
        t,
        S5CMD,
        b,
        peak_rss=max(runs.peaks),
        **runs.summary(dataset, settings, base),
        baseline_s5cmd_alone_seconds=round(statistics.median(s5cmd_alone), 6),
        tierd_in_daemon_seconds=round(statistics.median(inside), 6) if inside else None,
        fallbacks=fallbacks,
        server=f"rclone serve s3 ({s3.version}), :local: backend on the same disk",
        tierd_path="python -m tierd run: RestoreService, POST /v1/restores into an empty directory "
        "inside restore.allowed_roots; source the s3 tier (tier 0's replica deleted)",
        tierd_timing="the caller's: POST /v1/restores -> GET answering done (100 ms polls)",
        checksums="tierd: every file's CRC64NVME checked against first sight while written, fsynced, "
        "renamed, the marker last; s5cmd: none (then one sync)",
    )


def main() -> None:
    """Start rclone serve s3, make each checkpoint, compare restores, clean up."""
    settings = Settings.from_env(ROUNDS)
    base = Path(tempfile.mkdtemp(prefix="restore-", dir=bench_root()))
    try:
        with rclone_s3(base / "server") as s3:
            for kind in settings.kinds:
                tier0 = base / "nvme"
                if kind == "big":
                    dataset, rounds = (
                        make_big(tier0, settings.big_bytes, settings.big_shards),
                        settings.rounds,
                    )
                else:
                    dataset = make_small(tier0, settings.small_files)
                    rounds = settings.small_rounds("TIERD_BENCH_RESTORE_SMALL_ROUNDS", SMALL_ROUNDS)
                work = base / kind
                work.mkdir()
                _compare(work, s3, dataset, settings, rounds)
                shutil.rmtree(work)
                shutil.rmtree(tier0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
