"""Upload and download of the big and the small checkpoint to Azurite, tierd against ``rclone copy``.

Azurite is not Azure: one Node process on this machine, keeping blobs in local files, on the
same two cores as both clients. What this measures is each client's own cost (its time
against the other's on the same emulator, its CPU, its peak RSS), not Azure's throughput.

tierd's side runs in a process of its own (this module with ``--worker``): the transfer layer
a hop and a restore run (``bench.storecopy``: a ``FileCopier`` through
``copy_checkpoint_files``, small files in groups, the tier's default ``concurrency``), from a
POSIX tier into the Azure tier (blocks of 16 MiB staged in parallel with their CRC64, files
up to the single-put limit in one Put Blob) and back (ranged GETs into budget buffers,
hashed, fsynced, renamed), every file verified against its first-sight CRC64NVME. It is
timed inside the worker, from its first request to its last file verified, as a running
daemon would copy (its imports, seconds of CPU on a loaded machine, are not the copy's);
its peak RSS is its process's VmHWM, imports included. The baseline is ``rclone copy`` with
its azureblob backend at its defaults, pointed at the emulator (a Go binary: its start-up,
milliseconds, is in its time). CPU of each side is its own (``wait4`` for rclone, the
worker's ``os.times`` over the copy). Sides alternate each round; every run's figures are in
the result line (``*_spread``: [min, median, max]). Each round runs on an Azurite of its own
(each side uploads into its container, then downloads what it uploaded), removed after it.
``TIERD_BENCH_QUICK=1``: 256 MiB and 500 files, one round (``TIERD_BENCH_ROUNDS`` sets more).

``TIERD_BENCH_AZURE_DIAGNOSE_NO_CRC64=1`` is a diagnosis, not a measure of tierd: its worker
sends Put Blob and Put Block without ``x-ms-content-crc64`` (tierd always sends it), so the
time Azurite spends checking CRC64s shows; its result lines end ``_diagnosis_no_crc64``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.common import REPO, bench_root, emit, note, vm_hwm_bytes
from bench.datasets import STEP_DIR, Dataset, make_big, make_small
from bench.harness import Settings, prepare_cache
from bench.storecopy import EmulatorCpu, worker_env

__all__ = ["Measured", "main", "rclone_env", "remote", "summary"]

ROUNDS = 3
#: The tier's block size, its default.
BLOCK_SIZE = 16 * 2**20
#: Requests of each kind ``azure_emulator_cpu_per_gib`` sends (of ``BLOCK_SIZE`` each).
COST_BLOCKS = 4
HWM = "vm_hwm="
EMULATOR = "Azurite (azurite npm 3.37.0, Node 22) on this machine: not Azure"


@dataclass(frozen=True)
class Measured:
    """One run of one side: wall time, CPU (user + system) and peak RSS of its process."""

    seconds: float
    cpu_seconds: float
    peak_rss: int
    emulator_cpu_seconds: float = 0.0  # Azurite's, over the whole run of the side
    sync_seconds: float = 0.0  # ``sync`` right after an rclone download: tierd's files are durable


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


def summary(name: str, tierd: list[Measured], rclone: list[Measured], **extra: Any) -> dict[str, Any]:
    """One result line: medians' time ratio, CPU of each side and their ratio, tierd's peak RSS.

    Every run's figures go with it: ``*_spread`` is [min, median, max] of the seconds.
    """
    t, r = _median(tierd), _median(rclone)
    return emit(
        name,
        t.seconds,
        "rclone copy (azureblob backend, defaults)",
        r.seconds,
        peak_rss=max(m.peak_rss for m in tierd),
        tierd_cpu_seconds=round(t.cpu_seconds, 3),
        rclone_cpu_seconds=round(r.cpu_seconds, 3),
        cpu_ratio=round(t.cpu_seconds / r.cpu_seconds, 4) if r.cpu_seconds else None,
        rclone_peak_rss_bytes=max(m.peak_rss for m in rclone),
        tierd_spread=_spread([m.seconds for m in tierd]),
        rclone_spread=_spread([m.seconds for m in rclone]),
        tierd_cpu_spread=_spread([m.cpu_seconds for m in tierd]),
        rclone_cpu_spread=_spread([m.cpu_seconds for m in rclone]),
        tierd_peak_rss_runs=[m.peak_rss for m in tierd],
        tierd_emulator_cpu_spread=_spread([m.emulator_cpu_seconds for m in tierd]),
        rclone_emulator_cpu_spread=_spread([m.emulator_cpu_seconds for m in rclone]),
        emulator=EMULATOR,
        **_durable(t, rclone),
        **extra,
    )


def _durable(tierd: Measured, rclone: list[Measured]) -> dict[str, Any]:
    """For a download: rclone's time with the ``sync`` that makes its files durable, as tierd's are.

    tierd's download ends with its files fsynced (one ``syncfs`` per group, as ``cp`` + ``sync``);
    ``rclone copy`` leaves them in the page cache.
    """
    if not any(m.sync_seconds for m in rclone):
        return {}
    durable = _spread([m.seconds + m.sync_seconds for m in rclone])
    return {
        "rclone_sync_spread": _spread([m.sync_seconds for m in rclone]),
        "rclone_and_sync_spread": durable,
        "ratio_to_rclone_and_sync": round(tierd.seconds / durable[1], 4) if durable[1] else None,
    }


def _spread(values: list[float]) -> list[float]:
    """[min, median, max], rounded to milliseconds."""
    ordered = sorted(values)
    return [round(ordered[0], 3), round(ordered[len(ordered) // 2], 3), round(ordered[-1], 3)]


async def _worker(spec: dict[str, Any]) -> None:
    """The tierd side: copy every file of ``spec`` between a POSIX and the Azure tier.

    Prints its own timing (``storecopy.copy_files``: from its first request to its last file
    verified) as JSON, then its peak RSS.
    """
    from bench.storecopy import copy_files
    from tierd.config import AzureTier, PosixTier
    from tierd.daemon.backends import ByteBudget, PosixBackend
    from tierd.daemon.backends.azure import AzureBackend
    from tierd.daemon.pipeline.options import PipelineOptions

    budget = ByteBudget(PipelineOptions().memory_budget)
    azure_tier = AzureTier.model_validate(spec["tier"])
    posix_tier = PosixTier(name="p", kind="posix", path=Path(spec["posix"]))
    azure, posix = AzureBackend(azure_tier, budget=budget), PosixBackend(posix_tier, budget=budget)
    if spec["direction"] == "upload":
        result = await copy_files(posix, azure, azure_tier, spec["files"])
    else:
        result = await copy_files(azure, posix, posix_tier, spec["files"])
    print(json.dumps(result), flush=True)
    print(f"{HWM}{vm_hwm_bytes() or 0}", flush=True)


def _inside(measured: Measured, out: str) -> Measured:
    """The worker's own timing of its copy, with the peak RSS of its process."""
    timing = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    return Measured(timing["seconds"], timing["cpu_seconds"], measured.peak_rss)


def _side_argv(spec: dict[str, Any]) -> list[str]:
    """The worker's command line; the spec goes in a file (5,000 files' JSON exceed ARG_MAX)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="azure-spec-", dir=bench_root())
    with os.fdopen(fd, "w") as out:
        json.dump(spec, out)
    return [sys.executable, "-m", "bench.bench_azure", "--worker", path]


#: DIAGNOSIS ONLY, never a figure of tierd: Put Blob and Put Block without ``x-ms-content-crc64``.
DIAGNOSE_NO_CRC64 = "TIERD_BENCH_AZURE_DIAGNOSE_NO_CRC64"
DIRECTIONS = ("upload", "download")


def _diagnosis() -> bool:
    """Whether ``TIERD_BENCH_AZURE_DIAGNOSE_NO_CRC64`` asks for the diagnosis run (see the module)."""
    return os.environ.get(DIAGNOSE_NO_CRC64, "").lower() not in ("", "0", "false", "no")


def _withhold_crc64() -> None:
    """DIAGNOSIS ONLY: the worker's Put Blob and Put Block go without their CRC64 header.

    Shows how much of an upload's time is Azurite checking each block's CRC64 (JavaScript, a
    byte at a time); tierd always sends it. Result lines of such a run end ``_diagnosis_no_crc64``.
    """
    from tierd.daemon.backends.azure.rest import AzureRest

    put = AzureRest.put  # Put Blob and Put Block: the requests that carry it

    def without(self: AzureRest, *args: Any, headers: Any = None, **kwargs: Any) -> Any:
        kept = {k: v for k, v in (headers or {}).items() if k != "x-ms-content-crc64"}
        return put(self, *args, headers=kept, **kwargs)

    AzureRest.put = without  # type: ignore[method-assign]


def _compare(kind: str, dataset: Dataset, settings: Settings, work: Path) -> None:
    """Upload then download ``dataset``, each side in turn, on a fresh Azurite per round; emit both.

    A round's Azurite and its data go when the round ends (4 GiB uploaded by each side, which
    Azurite's own collection of deleted blobs, every 10 minutes, would free too late), so a
    full run holds one round's blobs at a time, not all rounds' (which filled the disk once).
    """
    from tests.fixtures.azurite import start_azurite

    runs: dict[str, dict[str, list[Measured]]] = {d: {"tierd": [], "rclone": []} for d in DIRECTIONS}
    load_before = os.getloadavg()
    for round_ in range(settings.rounds):
        order = ("tierd", "rclone") if round_ % 2 == 0 else ("rclone", "tierd")
        home = work / f"azurite-{kind}-{round_}"
        with start_azurite(home) as server:
            for direction, sides in _round(dataset, server, settings, home / "out", order).items():
                for side, measured in sides.items():
                    runs[direction][side].append(measured)
        shutil.rmtree(home, ignore_errors=True)
    suffix = "_diagnosis_no_crc64" if _diagnosis() else ""
    for direction in DIRECTIONS:
        summary(
            f"azure_{direction}_{kind}{suffix}",
            runs[direction]["tierd"],
            runs[direction]["rclone"],
            dataset=dataset.layout,
            rounds=settings.rounds,
            loadavg_1_5_15m_before_after=[
                [round(x, 2) for x in load_before],
                [round(x, 2) for x in os.getloadavg()],
            ],
            **({"diagnosis": "tierd sent no x-ms-content-crc64 (not tierd's behaviour)"} if suffix else {}),
        )


def _round(
    dataset: Dataset, server: Any, settings: Settings, target: Path, order: tuple[str, ...]
) -> dict[str, dict[str, Measured]]:
    """Each side uploads ``dataset`` into a container of its own, then downloads what it uploaded."""
    from tests.fixtures.azurite import ACCOUNT, ACCOUNT_KEY
    from tests.fixtures.s3servers import rclone_binary

    files = [(f.relpath, f.size, f.checksum, f.mtime_ns) for f in dataset.files]
    env = rclone_env(server.url, ACCOUNT, ACCOUNT_KEY)
    tier = server.new_tier("bench").model_dump(mode="json")
    tier["account_key"], tier["block_size"] = ACCOUNT_KEY, BLOCK_SIZE
    seed, src = server.create_container(), dataset.tier0
    results: dict[str, dict[str, Measured]] = {d: {} for d in DIRECTIONS}
    for direction in DIRECTIONS:
        for side in order:
            prepare_cache([src / f.relpath for f in dataset.files], settings.cache)
            dest = target / direction / side
            dest.mkdir(parents=True)
            if side == "tierd":
                posix = str(src) if direction == "upload" else str(dest)
                spec = {"tier": tier, "posix": posix, "files": files, "direction": direction}
                argv = _side_argv(spec | {"diagnosis_no_crc64": _diagnosis()})
            else:
                pair = [str(src), remote(seed, "")]
                argv = [rclone_binary(), "copy", *(pair if direction == "upload" else [pair[1], str(dest)])]
            results[direction][side] = _measure(side, argv, env, server.pid, direction == "download")
            shutil.rmtree(dest, ignore_errors=True)  # one side's 4 GiB on the disk at a time
    return results


def _measure(side: str, argv: list[str], env: dict[str, str], emulator: int, download: bool) -> Measured:
    """One run of ``side``, with the emulator's CPU seconds over it (and rclone's download's ``sync``)."""
    with EmulatorCpu(emulator) as cpu:
        measured, out = run(argv, env if side == "rclone" else worker_env())
    if side == "tierd":
        measured = _inside(measured, out)
    synced = 0.0
    if side == "rclone" and download:
        started = time.monotonic()
        subprocess.run(["sync"], check=True)
        synced = time.monotonic() - started
    return replace(measured, emulator_cpu_seconds=cpu.seconds, sync_seconds=synced)


def _median(runs: list[Measured]) -> Measured:
    ordered = sorted(runs, key=lambda m: m.seconds)
    return ordered[len(ordered) // 2]


async def _emulator_costs(server: Any) -> dict[str, float]:
    """Azurite's own CPU seconds per GiB for each kind of request, ``COST_BLOCKS`` of 16 MiB each.

    Put Block with tierd's ``x-ms-content-crc64``, with rclone's ``Content-MD5``, and with
    neither; Put Blob with each; Get Blob; each kind twice, the second pass kept. Azurite
    computes CRC64 in JavaScript, a byte at a time, for every Put Block without an MD5 (to
    echo it), and MD5 with Node's native crypto.
    """
    from azure.core.credentials import AzureNamedKeyCredential

    from bench.storecopy import process_cpu
    from tests.fixtures.azurite import ACCOUNT, ACCOUNT_KEY
    from tierd.daemon.backends.azure.blocks import azure_crc64
    from tierd.daemon.backends.azure.rest import AzureRest, Signer
    from tierd.daemon.backends.hashing import crc64

    data = memoryview(os.urandom(BLOCK_SIZE))
    crc = {"x-ms-content-crc64": azure_crc64(await crc64(data))}
    md5 = {"Content-MD5": base64.b64encode(hashlib.md5(data).digest()).decode()}
    blob = {"x-ms-blob-type": "BlockBlob"}
    kinds = {
        "put_block_crc64": ("comp=block&blockid=", crc),  # tierd's
        "put_block_content_md5": ("comp=block&blockid=", md5),  # rclone's
        "put_block_no_checksum": ("comp=block&blockid=", {}),
        "put_blob_crc64": ("", blob | crc),  # tierd's
        "put_blob_content_md5": ("", blob | md5),
        "get_blob": ("", {}),
    }
    signer = Signer(ACCOUNT, AzureNamedKeyCredential(ACCOUNT, ACCOUNT_KEY))
    rest = AzureRest(server.url, server.create_container(), signer, connections=4)
    costs: dict[str, float] = {}
    try:
        for kind, (query, headers) in [*kinds.items(), *kinds.items()]:  # the first pass warms Node up
            before = process_cpu(server.pid)
            for index in range(COST_BLOCKS):
                ask = f"{query}{base64.b64encode(f'{index:06d}'.encode()).decode()}" if query else ""
                if kind != "get_blob":
                    await rest.put("cost", kind, "cost", data, query=ask, headers=headers)
                    continue
                async with rest.get("cost", kind, "cost") as got:
                    while await got.read(BLOCK_SIZE):
                        pass
            costs[kind] = round((process_cpu(server.pid) - before) * 2**30 / (COST_BLOCKS * BLOCK_SIZE), 2)
    finally:
        await rest.close()
    return costs


def _report_costs(server: Any) -> None:
    """One result line: Azurite's CPU per GiB by request kind, tierd's Put Block over rclone's."""
    costs = asyncio.run(_emulator_costs(server))
    note(f"azurite CPU seconds per GiB by request kind: {costs}")
    emit(
        "azure_emulator_cpu_per_gib",
        costs["put_block_crc64"],
        "Azurite's CPU per GiB of Put Block with Content-MD5 (rclone's)",
        costs["put_block_content_md5"],
        peak_rss=0,
        emulator_cpu_seconds_per_gib=costs,
        emulator=EMULATOR,
    )


def main() -> None:
    """Both checkpoints, upload and download, against rclone on one Azurite."""
    from tests.fixtures.azurite import start_azurite

    settings = Settings.from_env(ROUNDS)
    with tempfile.TemporaryDirectory(dir=bench_root()) as tmp:
        with start_azurite(Path(tmp) / "costs") as server:
            _report_costs(server)
        shutil.rmtree(Path(tmp) / "costs", ignore_errors=True)
        work = Path(tmp)
        for kind in settings.kinds:
            tier0 = work / f"tier0-{kind}"
            if kind == "big":
                dataset = make_big(tier0, settings.big_bytes, settings.big_shards)
            else:
                dataset = make_small(tier0, settings.small_files)
            note(f"azure {kind}: {dataset.layout} under {tier0 / STEP_DIR}")
            _compare(kind, dataset, settings, work)
            shutil.rmtree(tier0, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        spec_file = Path(sys.argv[2])
        worker_spec = json.loads(spec_file.read_text())
        spec_file.unlink()
        if worker_spec.get("diagnosis_no_crc64"):
            _withhold_crc64()
        asyncio.run(_worker(worker_spec))
    else:
        main()
