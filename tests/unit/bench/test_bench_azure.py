"""bench_azure's helpers: rclone pointed at the emulator, one process measured, one result line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.bench_azure import Measured, rclone_env, remote, run, summary


def test_rclone_is_pointed_at_the_emulator_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCLONE_AZUREBLOB_SAS_URL", "https://elsewhere")
    env = rclone_env("http://127.0.0.1:1/devstoreaccount1", "devstoreaccount1", "a2V5")
    assert env["RCLONE_AZUREBLOB_ENDPOINT"] == "http://127.0.0.1:1/devstoreaccount1"
    assert (env["RCLONE_AZUREBLOB_ACCOUNT"], env["RCLONE_AZUREBLOB_KEY"]) == ("devstoreaccount1", "a2V5")
    assert "RCLONE_AZUREBLOB_SAS_URL" not in env
    assert env["RCLONE_CONFIG"] == "/dev/null"
    assert remote("box", "job/") == ":azureblob:box/job/"


def test_run_measures_the_child_alone() -> None:
    script = (
        "from bench.common import vm_hwm_bytes; b = bytearray(80 * 2**20); "
        "b[::4096] = b'x' * len(b[::4096]); print('ok'); print(f'vm_hwm={vm_hwm_bytes()}')"
    )
    measured, out = run([sys.executable, "-c", script])
    assert out.splitlines()[0] == "ok"
    assert measured.seconds > 0
    assert measured.cpu_seconds > 0
    assert 80 * 2**20 <= measured.peak_rss < 160 * 2**20  # the child's own, not this process's


def test_run_says_why_a_side_failed() -> None:
    with pytest.raises(RuntimeError, match="exited 3: boom"):
        run([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])


def test_summary_gives_ratios_cpu_and_the_emulator(capsys: pytest.CaptureFixture[str]) -> None:
    tierd = [Measured(2.0, 1.0, 100), Measured(1.0, 0.5, 120), Measured(3.0, 2.0, 90)]
    result = summary("azure_upload_big", tierd, [Measured(4.0, 4.0, 300)], rounds=3)
    assert json.loads(capsys.readouterr().out) == result
    assert (result["ratio"], result["cpu_ratio"], result["peak_rss_bytes"]) == (0.5, 0.25, 120)
    assert (result["tierd_spread"], result["tierd_cpu_spread"]) == ([1.0, 2.0, 3.0], [0.5, 1.0, 2.0])
    assert "not Azure" in result["emulator"]


def test_a_download_is_also_compared_with_rclone_and_its_sync(capsys: pytest.CaptureFixture[str]) -> None:
    rclone = [Measured(1.0, 1.0, 300, sync_seconds=1.0), Measured(2.0, 1.0, 300, sync_seconds=2.0)]
    result = summary("azure_download_small", [Measured(3.0, 1.0, 100)], rclone)
    assert result["ratio"] == 1.5  # against rclone copy alone (the median of two: the second)
    assert (result["rclone_and_sync_spread"], result["ratio_to_rclone_and_sync"]) == ([2.0, 4.0, 4.0], 0.75)
    upload = summary("azure_upload_small", [Measured(3.0, 1.0, 100)], [Measured(2.0, 1.0, 300)])
    assert "ratio_to_rclone_and_sync" not in upload


def test_the_emulators_cpu_is_read_from_its_own_process() -> None:
    from bench.storecopy import EmulatorCpu, process_cpu, worker_env

    busy = subprocess.Popen(
        [sys.executable, "-c", "import sys; sum(range(20_000_000)); sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        with EmulatorCpu(busy.pid) as cpu:
            deadline = time.monotonic() + 60
            while process_cpu(busy.pid) < 0.2 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert cpu.seconds >= 0.2
    finally:
        busy.communicate(b"")
    assert process_cpu(busy.pid) == 0.0  # gone
    assert worker_env()["MALLOC_ARENA_MAX"] == "2"


def test_the_workers_spec_goes_in_a_file_not_on_the_command_line() -> None:
    from bench.bench_azure import _side_argv

    spec = {"files": [[f"job/step_1/d/{i:05d}.bin", 4096, "AAAAAAAAAAA=", 1] for i in range(5000)]}
    argv = _side_argv(spec)
    path = Path(argv[-1])
    try:
        assert json.loads(path.read_text()) == spec
        assert sum(len(arg) for arg in argv) < 4096  # 5,000 files' JSON as an argument: E2BIG
    finally:
        path.unlink()


async def test_the_crc64_diagnosis_is_off_unless_asked_and_drops_only_that_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench import bench_azure
    from tierd.daemon.backends.azure.rest import AzureRest

    monkeypatch.delenv(bench_azure.DIAGNOSE_NO_CRC64, raising=False)
    assert not bench_azure._diagnosis()
    monkeypatch.setenv(bench_azure.DIAGNOSE_NO_CRC64, "1")
    assert bench_azure._diagnosis()
    seen: list[dict[str, str]] = []

    async def put(self: AzureRest, *args: object, headers: dict[str, str], **kwargs: object) -> None:
        seen.append(headers)

    monkeypatch.setattr(AzureRest, "put", put)
    bench_azure._withhold_crc64()
    sent = {"x-ms-content-crc64": "AAAAAAAAAAA=", "x-ms-blob-type": "BlockBlob"}
    await AzureRest.put(object.__new__(AzureRest), "b", "write", "az://c/b", memoryview(b""), headers=sent)
    assert seen == [{"x-ms-blob-type": "BlockBlob"}]
    assert sent["x-ms-content-crc64"] == "AAAAAAAAAAA="  # the caller's headers are left alone
