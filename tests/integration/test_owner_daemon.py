"""Copies keep owner and mode, end to end with the real daemon (``python -m tierd run``).

A job running as uid 1234 writes a private step (files 0640, directories 0750); tierd runs as
root. Every copy must keep that: object metadata on S3 (rclone's ``mode``/``uid``/``gid``),
owner and mode on the next POSIX tier, and again in a restore.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.fixtures.s3servers import S3Server
from tests.integration import test_lifecycle_daemon as lifecycle
from tests.integration.daemon_helpers import tier_dict, write_files
from tests.integration.test_lifecycle_daemon import RUN, STEP_FILES, Lab, LabFactory, posix_tier
from tests.integration.test_restore_daemon import ask, finished, make, restores_root

lab = lifecycle.lab  # the lifecycle tests' daemon fixture (tier 0 watched for run "demo")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a job's owner other than tierd's needs root")

JOB = 1234
FILE_MODE, DIR_MODE = 0o640, 0o750


def shape(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def write_private_step(lab_: Lab, step: int) -> Path:
    """Write a step as uid 1234 would (0640 files in a 0750 directory), then move it into place at once."""
    staging = lab_.root / "nvme" / ".staging" / f"step{step}"
    write_files(staging, STEP_FILES, seed=step)
    for path in staging.iterdir():
        os.chown(path, JOB, JOB)
        os.chmod(path, FILE_MODE)
    os.chown(staging, JOB, JOB)
    os.chmod(staging, DIR_MODE)
    final = lab_.root / "nvme" / RUN / f"step{step}"
    staging.rename(final)  # the detector sees it whole, owners and modes already set
    return final


def test_a_private_step_keeps_its_owner_and_mode_as_s3_metadata(
    lab: LabFactory, tmp_path: Path, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3")
    lab_ = lab([posix_tier(tmp_path, "nvme"), tier_dict(s3)])
    write_private_step(lab_, 1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("s3") == "verified", "step 1 on s3")
    client = moto_server.client()
    for name in STEP_FILES:
        head = client.head_object(Bucket=s3.bucket, Key=f"{RUN}/step1/{name}")
        assert head["Metadata"] == {"mode": "0100640", "uid": str(JOB), "gid": str(JOB)}, name
    detail = lab_.call("GET", f"/v1/checkpoints/{lab_.checkpoints()[1]['id']}").json()
    assert {(f["uid"], f["gid"], f["mode"]) for f in detail["files"]} == {(JOB, JOB, "0640")}
    assert {"path": f"{RUN}/step1", "uid": JOB, "gid": JOB, "mode": "0750"} in detail["directories"]
    assert lab_.daemon.terminate(30) == 0


def test_a_private_step_keeps_its_owner_and_mode_on_the_next_posix_tier_and_in_a_restore(
    lab: LabFactory, tmp_path: Path
) -> None:
    lab_ = make(lab, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    write_private_step(lab_, 1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("pfs") == "verified", "step 1 on pfs")
    copied = tmp_path / "pfs" / RUN / "step1"
    assert {name: shape(copied / name) for name in STEP_FILES} == dict.fromkeys(
        STEP_FILES, (JOB, JOB, FILE_MODE)
    )
    assert shape(copied) == (JOB, JOB, DIR_MODE)

    target = restores_root(lab_) / "owned"
    done = finished(lab_, ask(lab_, run=RUN, step=1, target=str(target), source_tier="pfs")["id"])
    assert done["state"] == "done", done
    assert {name: shape(target / name) for name in STEP_FILES} == dict.fromkeys(
        STEP_FILES, (JOB, JOB, FILE_MODE)
    )
    assert shape(target) == (JOB, JOB, DIR_MODE)

    given = restores_root(lab_) / "given"
    body = {"run": RUN, "step": 1, "target": str(given), "owner": {"uid": 4321, "gid": 4322}}
    done = finished(lab_, ask(lab_, **body)["id"])
    assert done["state"] == "done", done
    assert {name: shape(given / name) for name in STEP_FILES} == dict.fromkeys(
        STEP_FILES, (4321, 4322, FILE_MODE)
    )
    assert shape(given) == (4321, 4322, DIR_MODE)
    assert lab_.daemon.terminate(30) == 0
