"""A restore whose only copy sits in S3's GLACIER class, with the real daemon over moto's server.

Retention moves step 1 off tier 0 (``keep_last: 1``), leaving its one verified copy on an S3
tier with ``storage_class: GLACIER``. The restore fails at once (never hangs) with the tier
and class named and what to do, and the replica is not marked bad; once the objects are
restored with RestoreObject (as an operator would), the same restore asked again is done.
"""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.s3servers import S3Server
from tests.integration import test_lifecycle_daemon as lifecycle
from tests.integration.daemon_helpers import tier_dict
from tests.integration.test_lifecycle_daemon import RUN, LabFactory, posix_tier, tree
from tests.integration.test_restore_daemon import ask, finished, make, off_tier0, restores_root, step_files

lab = lifecycle.lab  # the lifecycle tests' daemon fixture (tier 0 watched for run "demo")


def test_a_glacier_only_copy_is_refused_naming_tier_and_class_then_restored_once_thawed(
    lab: LabFactory, tmp_path: Path, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("cold", storage_class="GLACIER")
    lab_ = make(
        lab,
        [posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0), tier_dict(s3)],
    )
    first = lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("cold") == "verified", "step 1 on the bucket")
    lab_.write_step(2)
    off_tier0(lab_, {1: 0, 2: 0}, gone={"nvme": {1}})

    failed = finished(lab_, ask(lab_, run=RUN, step=1, target=str(restores_root(lab_) / "cold"))["id"])
    assert failed["state"] == "failed"
    assert "tier cold keeps it in storage class GLACIER" in failed["error"]
    assert "aws s3api restore-object" in failed["error"]
    assert lab_.states()[1]["cold"] == "verified"  # asleep, not bad: nothing to repair

    client = moto_server.client()
    for key in first:
        client.restore_object(Bucket=s3.bucket, Key=key, RestoreRequest={"Days": 1})
    target = restores_root(lab_) / "thawed"
    done = finished(lab_, ask(lab_, run=RUN, step=1, target=str(target))["id"])
    assert (done["state"], done["source_tier"]) == ("done", "cold")
    assert tree(target) == step_files(first, 1)
    assert lab_.daemon.terminate(30) == 0
