"""``tierd.client`` (sync and async) against the real daemon, as a training job uses it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import http
from tests.fixtures.job_daemon import JobDaemon, start_job_daemon
from tests.fixtures.net import free_port
from tests.integration.daemon_helpers import wait_for, write_files
from tierd.client import AsyncClient, Client
from tierd.errors import ApiError, NotFound, TierdError, Unreachable, WaitTimeout

#: A DCP-like step: two ranks' shards, then the metadata that completes it.
STEP_FILES = {"__0_0.distcp": 4096, "__1_0.distcp": 4099, ".metadata": 512}
#: Written in tier 0 but outside every watched directory: only notify records these.
RUN = "manual"


@pytest.fixture(scope="module")
def tierd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobDaemon]:
    with start_job_daemon(tmp_path_factory.mktemp("job-client"), ["watched"]) as daemon:
        yield daemon


# Its tests share one daemon (the module fixture): on one xdist worker, started once.
pytestmark = pytest.mark.xdist_group("job_client")


def write_step(daemon: JobDaemon, step: int) -> Path:
    path = daemon.root / "nvme" / RUN / f"step{step}"
    write_files(path, STEP_FILES, seed=step)
    return path


def restores_exist(daemon: JobDaemon) -> bool:
    return "/v1/restores" in http.get(f"{daemon.url}/v1/openapi.json", timeout=10).json()["paths"]


def test_notify_with_metrics_and_world_size_then_latest_and_wait_durable(tierd: JobDaemon) -> None:
    path = write_step(tierd, 10)
    with Client() as client:
        recorded = client.notify(RUN, 10, path, metrics={"eval_loss": 1.5}, world_size=2)
        assert (recorded["step"], recorded["state"], recorded["metrics"]) == (
            10,
            "complete",
            {"eval_loss": 1.5},
        )
        assert recorded["path"] == f"{RUN}/step10"
        notified = [e for e in tierd.audit(recorded["id"]) if e["action"] == "notified"]
        assert [(e["actor"], e["detail"]["world_size"]) for e in notified] == [("api:job", 2)]

        latest = client.latest(RUN)
        assert latest is not None
        assert latest["id"] == recorded["id"]
        on_nvme = client.latest(RUN, tier="nvme")  # the copy to pfs may move on between the calls
        assert on_nvme is not None
        assert on_nvme["id"] == latest["id"]
        durable = client.wait_durable(RUN, 10, timeout=60, poll=0.1)
        assert {r["tier"]: r["state"] for r in durable["replicas"]}["pfs"] == "verified"
        on_pfs = client.latest(RUN, durable=True)
        assert on_pfs is not None
        assert (on_pfs["step"], client.wait_durable(RUN, 10, tier="pfs", timeout=5)["id"]) == (
            10,
            recorded["id"],
        )
        assert client.latest("no-such-run") is None
        assert client.latest(RUN, tier="no-such-tier") is None


def test_wait_durable_times_out(tierd: JobDaemon) -> None:
    with Client() as client, pytest.raises(WaitTimeout) as late:
        client.wait_durable(RUN, 999, timeout=0.3, poll=0.05)
    assert late.value.retryable
    assert isinstance(late.value, TierdError)
    assert str(late.value) == f"{RUN}:999 not verified on a durable tier after 0.3 s (not recorded)"


async def test_the_async_client_does_the_same(tierd: JobDaemon) -> None:
    path = write_step(tierd, 20)
    async with AsyncClient() as client:
        recorded = await client.notify(RUN, 20, str(path), metrics={"eval_loss": 1.25})
        assert (recorded["step"], recorded["metrics"]) == (20, {"eval_loss": 1.25})
        latest = await client.latest(RUN)
        assert latest is not None
        assert latest["step"] == 20
        durable = await client.wait_durable(RUN, 20, tier="pfs", timeout=60, poll=0.1)
        assert durable["id"] == recorded["id"]
        with pytest.raises(WaitTimeout):
            await client.wait_durable(RUN, 998, tier="pfs", timeout=0.2, poll=0.05)
        room = await client.reserve("nvme", 1)
        assert room["tier"] == "nvme"


def test_reserve_makes_room_or_says_what_blocks_it(tierd: JobDaemon) -> None:
    with Client() as client:
        room = client.reserve("nvme", 1024)
        assert (room["tier"], room["evicted"]) == ("nvme", [])
        with pytest.raises(ApiError) as full:
            client.reserve("nvme", 2**62)
        assert full.value.status == 409
        assert full.value.problem is not None
        assert "blocked" in full.value.problem
        with pytest.raises(ApiError) as unknown:
            client.reserve("tape", 1)
        assert unknown.value.status == 404


def test_errors_are_tierd_errors_with_the_problem_detail(tierd: JobDaemon, tmp_path: Path) -> None:
    with Client() as client, pytest.raises(ApiError) as outside:
        client.notify(RUN, 1, tmp_path)
    assert outside.value.status == 422
    assert "is not inside the tier-0 root" in outside.value.detail
    with Client(token="wrong") as stranger, pytest.raises(ApiError) as denied:
        stranger.latest(RUN)
    assert denied.value.status == 401
    with Client(url=f"http://127.0.0.1:{free_port()}") as nowhere, pytest.raises(Unreachable) as down:
        nowhere.notify(RUN, 1, "x")
    assert down.value.retryable


def test_ensure_local_refuses_a_run_with_nothing_to_resume(tierd: JobDaemon, tmp_path: Path) -> None:
    with Client() as client, pytest.raises(NotFound):
        client.ensure_local("no-such-run", "latest", tmp_path)


def test_ensure_local_at_tier0_location_restores_nothing(tierd: JobDaemon) -> None:
    path = write_step(tierd, 30)
    with Client() as client:
        recorded = client.notify(RUN, 30, path)
        assert client.ensure_local(RUN, 30, path) == path
        assert client.ensure_local(RUN, "latest", path, durable=False) == path
    assert not [e for e in tierd.audit(recorded["id"]) if "restore" in e["action"]]


def test_restore_and_ensure_local_restore_once(tierd: JobDaemon) -> None:
    if not restores_exist(tierd):
        pytest.skip("POST /v1/restores is not in this build yet")
    path = write_step(tierd, 40)
    dest = tierd.root / "nvme" / "restored40"
    seen: list[dict[str, Any]] = []
    with Client() as client:
        client.notify(RUN, 40, path)
        client.wait_durable(RUN, 40, timeout=60, poll=0.1)
        job = client.restore(run=RUN, step=40, target=dest, progress=seen.append, poll=0.05)
        assert job["state"] == "done"
        assert seen[-1]["state"] == "done"
        assert sorted(p.name for p in dest.iterdir()) == sorted(STEP_FILES)
        again = tierd.root / "nvme" / "resume"
        assert client.ensure_local(RUN, 40, again) == again
        restores = len(tierd.get("/v1/restores")["items"])
        assert client.ensure_local(RUN, 40, again) == again
        assert len(tierd.get("/v1/restores")["items"]) == restores
    assert {p.name: p.read_bytes() for p in again.iterdir()} == {
        p.name: p.read_bytes() for p in path.iterdir()
    }


def _tier0(daemon: JobDaemon, checkpoint_id: int) -> str:
    detail = daemon.get(f"/v1/checkpoints/{checkpoint_id}")
    return str(next(r["state"] for r in detail["replicas"] if r["tier_index"] == 0))


def _actions(daemon: JobDaemon, checkpoint_id: int) -> list[str]:
    return [e["action"] for e in daemon.audit(checkpoint_id)]


def _contents(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_ensure_local_looks_at_tier0_and_restores_what_it_lost(tierd: JobDaemon) -> None:
    """No watcher sees this run (it is unwatched): only the look before "it is here" can tell."""
    path = write_step(tierd, 50)
    written = _contents(path)
    with Client() as client:
        recorded = client.notify(RUN, 50, path)
        client.wait_durable(RUN, 50, timeout=60, poll=0.1)
        assert client.ensure_local(RUN, 50, path) == path  # here: nothing restored
        assert _tier0(tierd, recorded["id"]) == "verified"
        shutil.rmtree(path)  # the NVMe wiped
        assert client.ensure_local(RUN, 50, path) == path
    assert _contents(path) == written  # restored from pfs
    assert _tier0(tierd, recorded["id"]) == "deleted"
    assert "vanished" in _actions(tierd, recorded["id"])
    assert "restore_done" in _actions(tierd, recorded["id"])


def test_ensure_local_restores_a_step_missing_one_file_on_tier0(tierd: JobDaemon) -> None:
    path = write_step(tierd, 60)
    written = _contents(path)
    with Client() as client:
        recorded = client.notify(RUN, 60, path)
        client.wait_durable(RUN, 60, timeout=60, poll=0.1)
        (path / "__1_0.distcp").unlink()
        (path / "__0_0.distcp").write_bytes(b"short")
        assert client.ensure_local(RUN, 60, path) == path
        answer = http.post(
            f"{tierd.url}/v1/checkpoints/{recorded['id']}/tier0-check",
            headers={"Authorization": "Bearer viewer-secret"},  # the read role may ask
            timeout=10,
        )
    assert _contents(path) == written
    assert _tier0(tierd, recorded["id"]) == "failed"
    assert "reverify_failed" in _actions(tierd, recorded["id"])
    assert answer.status_code == 200, answer.text
    assert (answer.json()["here"], answer.json()["state"]) == (False, "failed")


def test_a_step_removed_from_watched_tier0_is_noticed_within_seconds(tierd: JobDaemon) -> None:
    path = tierd.run_dir("watched") / "step70"
    write_files(path, STEP_FILES, seed=70)
    written = _contents(path)
    with Client() as client:
        recorded = client.notify("watched", 70, path)
        client.wait_durable("watched", 70, timeout=60, poll=0.1)
        shutil.rmtree(path)
        wait_for(
            lambda: _tier0(tierd, recorded["id"]) == "deleted", 10, "tier 0's replica marked deleted", 0.1
        )
        assert "vanished" in _actions(tierd, recorded["id"])
        assert client.ensure_local("watched", 70, path) == path
    assert _contents(path) == written
