"""Upload and download of the big and the small checkpoint to Azurite, tierd against ``rclone copy``.

Azurite is not Azure: one Node process on this machine, keeping blobs in local files, on the
same two cores as both clients. What this measures is each client's own cost (its time
against the other's on the same emulator, its CPU, its peak RSS), not Azure's throughput.

tierd's side runs in a process of its own (this module with ``--worker``): the Azure
backend's write path (blocks of the default 16 MiB staged in parallel with their CRC64,
files up to 1 MiB in one Put Blob), ``copy_object`` from a POSIX tier, as many files at a
time as a tier's default ``concurrency``, every file verified against its first-sight
CRC64NVME; the download is ``copy_object`` from the Azure tier into a POSIX tier (ranged
GETs, hashed, fsynced, renamed). It is the backends' path, not the daemon's hop (no catalog,
no grouping of small files). The baseline is ``rclone copy`` with its azureblob backend at
its defaults, pointed at the emulator. CPU and peak RSS of each side are its process's own
(``wait4``). Sides alternate; ``TIERD_BENCH_QUICK=1`` runs small sizes once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import REPO, bench_root, emit, note, vm_hwm_bytes
from bench.datasets import STEP_DIR, Dataset, make_big, make_small
from bench.harness import Settings, prepare_cache

__all__ = ["Measured", "main", "rclone_env", "remote", "summary"]

ROUNDS = 1
HWM = "vm_hwm="
EMULATOR = "Azurite (azurite npm 3.37.0, Node 22) on this machine: not Azure"


@dataclass(frozen=True)
class Measured:
    """One run of one side: wall time, CPU (user + system) and peak RSS of its process."""

    seconds: float
    cpu_seconds: float
    peak_rss: int


def rclone_env(url: str, account: str, key: str) -> dict[str, str]:
    """rclone's environment for the emulator: its account, key and endpoint; no user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCLONE_")}
    env.update(
        RCLONE_CONFIG="/dev/null",
        RCLONE_AZUREBLOB_ACCOUNT=account,
        RCLONE_AZUREBLOB_KEY=key,
        RCLONE_AZUREBLOB_ENDPOINT=url,
    )
    return env


def remote(container: str, prefix: str) -> str:
    """rclone's on-the-fly azureblob remote for ``container/prefix``."""
    return f":azureblob:{container}/{prefix}"


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[Measured, str]:
    """Run ``argv`` to its end; its time, its own CPU (wait4), peak RSS (``VmHWM``) and stdout.

    Peak RSS is sampled from ``/proc`` every 50 ms, and a child that prints a last line
    ``vm_hwm=<bytes>`` (tierd's worker does, from its own ``/proc/self/status``) is taken at
    its word when that is more: ``wait4``'s ``ru_maxrss`` counts the forking parent's memory
    too (this process's, before the exec).
    """
    started = time.monotonic()
    peak = [0]
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env, cwd=REPO)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                peak[0] = max(peak[0], vm_hwm_bytes(proc.pid) or 0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert proc.stderr is not None
        with proc.stderr:
            errors = proc.stderr.read()  # to its end, so a chatty child never blocks on a full pipe
        _, status, usage = os.wait4(proc.pid, 0)
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        text = out.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {errors.decode()[-2000:]}")
    reported = [int(line.removeprefix(HWM)) for line in text.splitlines() if line.startswith(HWM)]
    return Measured(seconds, usage.ru_utime + usage.ru_stime, max([peak[0], *reported])), text


def summary(name: str, tierd: Measured, rclone: Measured, **extra: Any) -> dict[str, Any]:
    """One result line: time ratio, CPU of each side and their ratio, tierd's peak RSS."""
    return emit(
        name,
        tierd.seconds,
        "rclone copy (azureblob backend, defaults)",
        rclone.seconds,
        peak_rss=tierd.peak_rss,
        tierd_cpu_seconds=round(tierd.cpu_seconds, 3),
        rclone_cpu_seconds=round(rclone.cpu_seconds, 3),
        cpu_ratio=round(tierd.cpu_seconds / rclone.cpu_seconds, 4) if rclone.cpu_seconds else None,
        rclone_peak_rss_bytes=rclone.peak_rss,
        emulator=EMULATOR,
        **extra,
    )


async def _worker(spec: dict[str, Any]) -> None:
    """The tierd side: copy every file of ``spec`` between a POSIX and the Azure tier."""
    from tierd.config import AzureTier, PosixTier
    from tierd.daemon.backends import PosixBackend, copy_object
    from tierd.daemon.backends.azure import AzureBackend

    azure = AzureBackend(AzureTier.model_validate(spec["tier"]))
    posix = PosixBackend(PosixTier(name="p", kind="posix", path=Path(spec["posix"])))
    src, dst = (posix, azure) if spec["direction"] == "upload" else (azure, posix)
    slots = asyncio.Semaphore(16)  # a tier's default concurrency

    async def one(relpath: str, crc: str) -> None:
        async with slots:
            await copy_object(src, relpath, dst, relpath, crc)

    try:
        await asyncio.gather(*(one(relpath, crc) for relpath, crc in spec["files"]))
    finally:
        await azure.close()
        await posix.close()
    print(f"{HWM}{vm_hwm_bytes() or 0}", flush=True)


def _side_argv(spec: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "bench.bench_azure", "--worker", json.dumps(spec)]


def _compare(kind: str, dataset: Dataset, server: Any, settings: Settings, work: Path) -> None:
    """Upload then download ``dataset``, each side in turn, and emit both results."""
    from tests.fixtures.azurite import ACCOUNT, ACCOUNT_KEY
    from tests.fixtures.s3servers import rclone_binary

    files = [(f.relpath, f.checksum) for f in dataset.files]
    env = rclone_env(server.url, ACCOUNT, ACCOUNT_KEY)
    for direction in ("upload", "download"):
        tierd_runs, rclone_runs = [], []
        for round_ in range(settings.rounds):
            container = server.create_container()
            seed = server.create_container()
            tier = server.new_tier("bench", container=container).model_dump(mode="json")
            tier["account_key"], tier["block_size"] = ACCOUNT_KEY, 16 * 2**20
            src = dataset.tier0
            if direction == "download":  # both sides read what tierd uploaded
                run(_side_argv({"tier": tier, "posix": str(src), "files": files, "direction": "upload"}))
                run([rclone_binary(), "copy", str(src), remote(seed, "")], env)
            target = work / f"{direction}-{round_}"
            for side in ("tierd", "rclone") if round_ % 2 == 0 else ("rclone", "tierd"):
                prepare_cache([dataset.tier0 / f.relpath for f in dataset.files], settings.cache)
                dest = target / side
                dest.mkdir(parents=True)
                if side == "tierd":
                    posix = str(src) if direction == "upload" else str(dest)
                    spec = {"tier": tier, "posix": posix, "files": files, "direction": direction}
                    tierd_runs.append(run(_side_argv(spec))[0])
                elif direction == "upload":
                    rclone_runs.append(run([rclone_binary(), "copy", str(src), remote(seed, "")], env)[0])
                else:
                    rclone_runs.append(run([rclone_binary(), "copy", remote(seed, ""), str(dest)], env)[0])
            shutil.rmtree(target, ignore_errors=True)
        summary(
            f"azure_{direction}_{kind}",
            _median(tierd_runs),
            _median(rclone_runs),
            dataset=dataset.layout,
            rounds=settings.rounds,
        )


def _median(runs: list[Measured]) -> Measured:
    ordered = sorted(runs, key=lambda m: m.seconds)
    return ordered[len(ordered) // 2]


def main() -> None:
    """Both checkpoints, upload and download, against rclone on one Azurite."""
    from tests.fixtures.azurite import start_azurite

    settings = Settings.from_env(ROUNDS)
    with tempfile.TemporaryDirectory(dir=bench_root()) as tmp, start_azurite(Path(tmp)) as server:
        work = Path(tmp)
        for kind in settings.kinds:
            tier0 = work / f"tier0-{kind}"
            if kind == "big":
                dataset = make_big(tier0, settings.big_bytes, settings.big_shards)
            else:
                dataset = make_small(tier0, settings.small_files)
            note(f"azure {kind}: {dataset.layout} under {tier0 / STEP_DIR}")
            _compare(kind, dataset, server, settings, work)
            shutil.rmtree(tier0, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        asyncio.run(_worker(json.loads(sys.argv[2])))
    else:
        main()
