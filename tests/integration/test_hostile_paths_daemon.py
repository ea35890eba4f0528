"""A hostile job against the real daemon: symlinks planted in a step, or in a restore target.

tierd runs as root beside jobs that write tier 0 and restore targets. Each test plays such a
job: it plants a symlink where tierd is about to write or delete, then shows that nothing
outside the tiers and the allowed restore roots changed, through the API as a user sees it.
"""

from __future__ import annotations

from pathlib import Path

from tests.integration import test_lifecycle_daemon as lifecycle
from tests.integration.test_lifecycle_daemon import RUN, LabFactory, posix_tier, tree
from tests.integration.test_restore_daemon import finished, make, restores_root

lab = lifecycle.lab

PROBLEM = "application/problem+json"
NESTED = {"__0_0.distcp": 64 * 1024, "sub/x.bin": 4096, ".metadata": 2048}


def victim(tmp_path: Path) -> Path:
    """A directory no job may write, holding a file named as a step's file is."""
    where = tmp_path / "victim"
    where.mkdir()
    (where / "x.bin").write_bytes(b"root's own file")
    return where


def test_a_restore_never_writes_through_a_symlinked_subdirectory(lab: LabFactory, tmp_path: Path) -> None:
    lab_ = make(lab, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    lab_.write_step(1, NESTED)
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    outside = victim(tmp_path)
    target = restores_root(lab_) / "mine"
    target.mkdir()
    (target / "sub").symlink_to(outside)  # the job's "subdirectory", pointing at /etc/cron.d
    body = {"run": RUN, "step": 1, "target": str(target), "overwrite": True, "source_tier": "pfs"}
    answer = lab_.call("POST", "/v1/restores", json=body)
    assert answer.status_code == 202, answer.text
    done = finished(lab_, answer.json()["id"])
    assert done["state"] == "failed"
    assert "symlink" in done["error"], done
    assert tree(outside) == {"x.bin": b"root's own file"}
    assert (target / "sub").is_symlink()
    assert lab_.daemon.terminate(30) == 0


def test_retention_never_deletes_through_a_symlink_planted_in_a_step(lab: LabFactory, tmp_path: Path) -> None:
    lab_ = make(
        lab,
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            posix_tier(tmp_path, "pfs"),
        ],
    )
    lab_.write_step(1, NESTED)
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    outside = victim(tmp_path)
    step1 = tmp_path / "nvme" / RUN / "step1"
    (step1 / "sub" / "x.bin").unlink()
    (step1 / "sub").rmdir()
    (step1 / "sub").symlink_to(outside)  # after the step was recorded
    lab_.write_step(2, NESTED)
    # Retention (step 2 makes step 1 the one to drop) races the detector, which sees step 1
    # changed (sub/x.bin gone) and marks its tier-0 copy failed: a changed step is the job's
    # own, left alone. Either way nothing is deleted through the symlink.
    ends = ("deleted", "failed")
    lab_.converge(lambda: lab_.states().get(1, {}).get("nvme") in ends, "step 1 deleted or failed on nvme")
    assert tree(outside) == {"x.bin": b"root's own file"}
    assert (step1 / "sub").is_symlink()  # not a recorded file: left as the job made it
    left = ["sub"] if lab_.states()[1]["nvme"] == "deleted" else [".metadata", "__0_0.distcp", "sub"]
    assert sorted(p.name for p in step1.iterdir()) == left
    assert lab_.daemon.terminate(30) == 0


def test_a_restore_into_a_recorded_step_is_refused(lab: LabFactory, tmp_path: Path) -> None:
    (tmp_path / "restores").mkdir()
    lab_ = lab(
        [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")],
        restore={"allowed_roots": [str(tmp_path / "nvme"), str(tmp_path / "restores")]},
    )
    lab_.write_step(1, NESTED)
    lab_.write_step(2, NESTED)
    lab_.converge(lambda: lab_.states().get(2, {}).get("pfs") == "verified", "step 2 on pfs")
    before = tree(tmp_path / "nvme")
    for target in (tmp_path / "nvme" / RUN / "step1", tmp_path / "nvme" / RUN / "step1" / "sub"):
        body = {"run": RUN, "step": 2, "target": str(target), "overwrite": True}
        answer = lab_.call("POST", "/v1/restores", json=body)
        assert (answer.status_code, answer.headers["content-type"]) == (422, PROBLEM), answer.text
        assert "recorded on tier nvme" in answer.json()["detail"]
    inside_own = {
        "run": RUN,
        "step": 1,
        "target": str(tmp_path / "nvme" / RUN / "step1" / "sub"),
        "overwrite": True,
    }
    assert lab_.call("POST", "/v1/restores", json=inside_own).status_code == 422
    assert tree(tmp_path / "nvme") == before
    own = {"run": RUN, "step": 1, "target": str(tmp_path / "nvme" / RUN / "step1"), "overwrite": True}
    answer = lab_.call("POST", "/v1/restores", json=own)  # its own bytes put back (ensure_local)
    assert answer.status_code == 202, answer.text
    assert finished(lab_, answer.json()["id"])["state"] == "done"
    assert tree(tmp_path / "nvme") == before
    assert lab_.daemon.terminate(30) == 0
