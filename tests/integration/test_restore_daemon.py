"""Restore end to end, with the real daemon (``python -m tierd run``) over POSIX tiers and S3 (moto).

Checkpoints are written into tier 0's watched directory as a training job would; retention
moves them off tier 0 (``keep_last: 1``); a restore is asked for through the API and
followed there; then the test looks at the bytes in the target and at the catalog.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from tests.fixtures.net import free_port
from tests.fixtures.ranks import run_ranks, save_filled
from tests.fixtures.s3servers import S3Server
from tests.integration import test_lifecycle_daemon as lifecycle
from tests.integration.daemon_helpers import MiB, tier_dict
from tests.integration.test_lifecycle_daemon import RUN, Lab, LabFactory, posix_tier, start, tree

lab = lifecycle.lab  # the lifecycle tests' daemon fixture (tier 0 watched for run "demo")

PROBLEM = "application/problem+json"
#: Six 2 MiB shards: through a 2 MB/s cap a restore takes about six seconds (time to act mid-way).
SLOW_STEP = {**{f"__{i}_0.distcp": 2 * MiB for i in range(6)}, ".metadata": 4096}


def restores_root(lab_: Lab) -> Path:
    return lab_.root / "restores"


def make(lab: LabFactory, tiers: list[dict[str, Any]]) -> Lab:
    root = Path(tiers[0]["path"]).parent
    (root / "restores").mkdir(exist_ok=True)
    return lab(tiers, restore={"allowed_roots": [str(root / "restores")]})


def ask(lab_: Lab, **body: Any) -> dict[str, Any]:
    answer = lab_.call("POST", "/v1/restores", json=body)
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def restore(lab_: Lab, restore_id: int) -> dict[str, Any]:
    answer = lab_.call("GET", f"/v1/restores/{restore_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def finished(lab_: Lab, restore_id: int, timeout: float = 60) -> dict[str, Any]:
    lab_.converge(
        lambda: restore(lab_, restore_id)["state"] in ("done", "failed", "cancelled"), "the restore"
    )
    return restore(lab_, restore_id)


def off_tier0(lab_: Lab, steps: dict[int, Any], *, gone: dict[str, set[int]]) -> None:
    """Wait until each tier of ``gone`` has deleted those steps."""

    def settled() -> bool:
        states = lab_.states()
        return all(states.get(s, {}).get(t) == "deleted" for t, ss in gone.items() for s in ss) and all(
            s in states for s in steps
        )

    lab_.converge(settled, f"retention to remove {gone}")


def step_files(files: dict[str, bytes], step: int) -> dict[str, bytes]:
    prefix = f"{RUN}/step{step}/"
    return {k.removeprefix(prefix): v for k, v in files.items()}


def temps(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if ".tierd-tmp-" in p.name]


# -- from the nearest tier, and from the last one --------------------------------------------


def test_restore_from_the_nearest_tier_after_tier0_lost_it(
    lab: LabFactory, tmp_path: Path, moto_server: S3Server
) -> None:
    lab_ = make(
        lab,
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs"),
            tier_dict(moto_server.new_tier("s3")),
        ],
    )
    first = lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("s3") == "verified", "step 1 on s3")
    lab_.write_step(2)
    off_tier0(lab_, {1: 0, 2: 0}, gone={"nvme": {1}})
    target = restores_root(lab_) / "nearest"
    done = finished(lab_, ask(lab_, run=RUN, step=1, target=str(target))["id"])
    assert (done["state"], done["source_tier"], done["fallbacks"]) == ("done", "pfs", [])
    assert tree(target) == step_files(first, 1)
    assert (done["files_done"], done["bytes_done"]) == (3, sum(map(len, first.values())))
    actions = [e["action"] for e in lab_.audit(done["checkpoint_id"])]
    assert actions.index("restore_requested") < actions.index("restore_done")
    assert lab_.daemon.terminate(30) == 0


def test_restore_from_the_last_tier_after_every_nearer_tier_lost_it(
    lab: LabFactory, tmp_path: Path, moto_server: S3Server
) -> None:
    lab_ = make(
        lab,
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs", retention={"keep_last": 1}, delete_delay=0),
            tier_dict(moto_server.new_tier("s3")),
        ],
    )
    first = lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("s3") == "verified", "step 1 on s3")
    lab_.write_step(2)
    lab_.converge(lambda: lab_.states().get(2, {}).get("s3") == "verified", "step 2 on s3")
    off_tier0(lab_, {1: 0, 2: 0}, gone={"nvme": {1}, "pfs": {1}})
    target = restores_root(lab_) / "last"
    done = finished(lab_, ask(lab_, run=RUN, step=1, target=str(target))["id"])
    assert (done["state"], done["source_tier"]) == ("done", "s3")
    assert tree(target) == step_files(first, 1)
    assert lab_.daemon.terminate(30) == 0


# -- a bad byte on the nearest tier: fall back, mark it failed, the pipeline repairs it -------


def test_a_corrupted_byte_falls_back_marks_failed_and_is_repaired(
    lab: LabFactory, tmp_path: Path, moto_server: S3Server
) -> None:
    lab_ = make(
        lab,
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs"),
            tier_dict(moto_server.new_tier("s3")),
        ],
    )
    first = lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("s3") == "verified", "step 1 on s3")
    lab_.write_step(2)
    off_tier0(lab_, {1: 0, 2: 0}, gone={"nvme": {1}})
    step1 = lab_.checkpoints()[1]["id"]
    assert lab_.call("PUT", f"/v1/checkpoints/{step1}/pin", json={"reason": "restore"}).status_code == 200
    shard = tmp_path / "pfs" / RUN / "step1" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[777] ^= 0x5A
    shard.write_bytes(bytes(data))

    done = finished(lab_, ask(lab_, checkpoint_id=step1, to="tier0")["id"])
    assert (done["state"], done["source_tier"]) == ("done", "pfs")
    [fallback] = done["fallbacks"]
    assert (fallback["file"], fallback["from_tier"], fallback["to_tier"]) == (
        f"{RUN}/step1/__1_0.distcp",
        "pfs",
        "s3",
    )
    home = tmp_path / "nvme" / RUN / "step1"
    assert tree(home) == step_files(first, 1)
    lab_.converge(
        lambda: lab_.states()[1] == {"nvme": "verified", "pfs": "verified", "s3": "verified"}, "repair"
    )
    assert (tmp_path / "pfs" / RUN / "step1" / "__1_0.distcp").read_bytes() == first[
        f"{RUN}/step1/__1_0.distcp"
    ]
    actions = [(e["action"], e["tier"]) for e in lab_.audit(step1)]
    assert ("reverify_failed", "pfs") in actions
    assert len(lab_.checkpoints()) == 2  # the step put back on tier 0 is not recorded twice
    assert [e for e in lab_.audit() if e["action"] == "changed"] == []
    assert lab_.daemon.terminate(30) == 0


# -- by ranks of a real two-process DCP checkpoint ---------------------------------------------


def test_restore_by_ranks_of_a_real_dcp_checkpoint(lab: LabFactory, tmp_path: Path) -> None:
    lab_ = make(lab, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    directory = tmp_path / "nvme" / RUN / "step3"
    run_ranks(save_filled, (3, free_port(), str(directory)), 3)
    lab_.converge(lambda: lab_.states().get(3, {}).get("pfs") == "verified", "the DCP step on pfs")
    target = restores_root(lab_) / "rank1"
    done = finished(
        lab_, ask(lab_, run=RUN, latest=True, target=str(target), ranks=[1], source_tier="pfs")["id"]
    )
    assert (done["state"], done["files_total"]) == ("done", 2)
    assert sorted(p.name for p in target.iterdir()) == [".metadata", "__1_0.distcp"]
    state = {"rank1.w": torch.zeros(4096), "rank1.step": torch.tensor([0])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no process group here: DCP says it loads without one
        dcp_load(state, storage_reader=FileSystemReader(str(target)))
    assert torch.equal(state["rank1.w"], torch.full((4096,), 2.0))
    assert state["rank1.step"].item() == 1
    assert lab_.daemon.terminate(30) == 0


# -- cancel mid-way; kill -9 mid-way then resume -----------------------------------------------


def slow_lab(lab: LabFactory, tmp_path: Path) -> tuple[Lab, dict[str, bytes]]:
    """Step 1 only on pfs (read at 2 MB/s), step 2 on both."""
    lab_ = make(
        lab,
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs", bandwidth_limit="8MB"),
        ],
    )
    first = lab_.write_step(1, SLOW_STEP)
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    lab_.write_step(2, {".metadata": 10})
    off_tier0(lab_, {1: 0, 2: 0}, gone={"nvme": {1}})
    config = lab_.daemon.config_path.read_text().replace("bandwidth_limit: 8MB", "bandwidth_limit: 2MB")
    lab_.daemon.config_path.write_text(config)
    assert lab_.daemon.terminate(30) == 0
    start(lab_)
    return lab_, step_files(first, 1)


def test_cancel_mid_way_leaves_nothing(lab: LabFactory, tmp_path: Path) -> None:
    lab_, _ = slow_lab(lab, tmp_path)
    target = restores_root(lab_) / "cancelled"
    asked = ask(lab_, run=RUN, step=1, target=str(target))
    lab_.converge(lambda: restore(lab_, asked["id"])["files_done"] >= 1, "a file restored")
    answer = lab_.call("DELETE", f"/v1/restores/{asked['id']}", params={"reason": "wrong step"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "cancelled"
    assert answer.json()["files_done"] < answer.json()["files_total"], "cancelled too late to be mid-way"
    assert not target.exists()
    assert temps(restores_root(lab_)) == []
    assert [
        e["reason"] for e in lab_.audit(asked["checkpoint_id"]) if e["action"] == "restore_cancelled"
    ] == ["wrong step"]
    assert lab_.daemon.terminate(30) == 0


def test_kill_9_mid_way_then_the_restore_resumes(lab: LabFactory, tmp_path: Path) -> None:
    lab_, files = slow_lab(lab, tmp_path)
    target = restores_root(lab_) / "resumed"
    asked = ask(lab_, run=RUN, step=1, target=str(target))
    lab_.converge(lambda: restore(lab_, asked["id"])["files_done"] >= 2, "two files restored")
    lab_.daemon.kill()
    placed = {p.name: p.stat().st_ino for p in target.iterdir() if ".tierd-tmp-" not in p.name}
    assert 2 <= len(placed) < len(files)
    start(lab_)
    done = finished(lab_, asked["id"])
    assert done["state"] == "done"
    assert tree(target) == files
    assert {name: (target / name).stat().st_ino for name in placed} == placed  # found in place, kept
    assert temps(target) == []
    assert len(lab_.logged("restore_started")) == 2
    assert lab_.daemon.terminate(30) == 0


# -- every refused target ----------------------------------------------------------------------


def test_every_refused_target_is_a_4xx_problem(lab: LabFactory, tmp_path: Path) -> None:
    lab_ = make(lab, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    root = restores_root(lab_)
    (root / "busy").mkdir()
    (root / "busy" / "file").write_bytes(b"x")
    (root / "out").symlink_to(tmp_path)
    cases = [
        ({"target": str(tmp_path / "elsewhere")}, 422, "outside the allowed roots"),
        ({"target": f"{root}/../elsewhere"}, 422, "'..'"),
        ({"target": str(root / "out" / "x")}, 422, "symlink"),
        ({"target": str(root / "busy")}, 422, "not an empty directory"),
        ({"to": "tier0"}, 422, "not an empty directory"),
        ({"target": "relative/dir"}, 422, "not an absolute path"),
        ({"target": str(root / "x"), "source_tier": "tape"}, 422, "not a configured tier"),
    ]
    for extra, status, says in cases:
        answer = lab_.call("POST", "/v1/restores", json={"run": RUN, "step": 1, **extra})
        assert (answer.status_code, answer.headers["content-type"]) == (status, PROBLEM), extra
        assert says in answer.json()["detail"], (extra, answer.json())
    assert lab_.call("GET", "/v1/restores").json()["items"] == []
    assert sorted(p.name for p in root.iterdir()) == ["busy", "out"]
    assert lab_.daemon.terminate(30) == 0
