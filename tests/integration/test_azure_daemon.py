"""The azure tier end to end, in the real daemon started from a config file (issue 28).

A POSIX tier 0 and an Azure tier (Azurite): detection, the copy (blocks with their CRC64),
verification, retention's verify-before-delete on tier 0, a restore from Azure, and the
scrub, which compares the CRC64NVME recorded with each blob and reads no byte back (a record
changed behind its back is found while the bytes are intact). Then S3 -> Azure as a second
region in another cloud, a restore falling back from a bad S3 copy to Azure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fixtures.azurite import AzuriteServer
from tests.fixtures.s3servers import S3Server
from tests.integration import test_lifecycle_daemon as lifecycle
from tests.integration.daemon_helpers import MiB, tier_dict
from tests.integration.test_lifecycle_daemon import RUN, Lab, LabFactory, posix_tier

lab = lifecycle.lab  # the lifecycle tests' daemon fixture (tier 0 watched for run "demo")

#: Two ranks' shards, one of them blocks (1 MiB blocks), then the metadata that completes the step.
STEP = {"__0_0.distcp": 2 * MiB + 5, "__1_0.distcp": 64 * 1024, ".metadata": 2048}
SCRUB = {"every": "1s", "bandwidth": "100MB"}


def blobs(server: AzuriteServer, container: str) -> dict[str, bytes]:
    """Every committed blob of ``container`` with its bytes."""
    with server.container(container) as client:
        return {b.name: client.download_blob(b.name).readall() for b in client.list_blobs()}


def restored(lab_: Lab, step: int, target: Path) -> dict[str, Any]:
    """Restore ``step`` into ``target`` through the API and wait until it ends."""
    answer = lab_.call("POST", "/v1/restores", json={"run": RUN, "step": step, "target": str(target)})
    assert answer.status_code == 202, answer.text
    restore_id = answer.json()["id"]

    def state() -> dict[str, Any]:
        return dict(lab_.call("GET", f"/v1/restores/{restore_id}").json())

    lab_.converge(lambda: state()["state"] in ("done", "failed", "cancelled"), "the restore")
    return state()


def of_step(files: dict[str, bytes], step: int) -> dict[str, bytes]:
    prefix = f"{RUN}/step{step}/"
    return {k.removeprefix(prefix): v for k, v in files.items() if k.startswith(prefix)}


def test_posix_to_azure_copy_retention_restore_and_scrub(
    lab: LabFactory, tmp_path: Path, azurite_server: AzuriteServer
) -> None:
    """Two steps through copy and retention, a restore, a scrub pass: 30-45 s on this 2-core machine."""
    container = azurite_server.create_container()
    (tmp_path / "restores").mkdir()
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            azurite_server.tier_yaml("blob", container, block_size="1MiB", scrub=SCRUB),
        ],
        restore={"allowed_roots": [str(tmp_path / "restores")]},
    )
    files = lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("blob") == "verified", "step 1 on azure")
    files |= lab_.write_step(2)
    wanted = {1: {"nvme": "deleted", "blob": "verified"}, 2: {"nvme": "verified", "blob": "verified"}}
    lab_.converge(lambda: lab_.states() == wanted, "step 1 only on azure")
    assert blobs(azurite_server, container) == files
    step1 = lab_.checkpoints()[1]["id"]
    actions = [(e["action"], e["tier"]) for e in lab_.audit(step1)]
    assert actions.index(("replica_verified", "blob")) < actions.index(("deleted", "nvme"))

    done = restored(lab_, 1, tmp_path / "restores" / "one")
    assert (done["state"], done["source_tier"], done["fallbacks"]) == ("done", "blob", [])
    assert lifecycle.tree(tmp_path / "restores" / "one") == of_step(files, 1)

    with azurite_server.container(container) as client:  # the record changes, the bytes do not
        client.get_blob_client(f"{RUN}/step1/__1_0.distcp").set_blob_metadata({"crc64nvme": "AAAAAAAAAAE="})

    def mismatches() -> list[dict[str, Any]]:
        return [e for e in lab_.audit(step1) if e["action"] == "replica_mismatch"]

    lab_.converge(lambda: bool(mismatches()), "the scrub to find the changed record")
    assert (mismatches()[0]["actor"], mismatches()[0]["tier"]) == ("scrub", "blob")
    assert blobs(azurite_server, container) == files  # it compared the record: the bytes are intact
    assert lab_.daemon.terminate(30) == 0


def test_s3_then_azure_as_a_second_region_and_a_restore_falls_back_to_it(
    lab: LabFactory, tmp_path: Path, azurite_server: AzuriteServer, moto_server: S3Server
) -> None:
    """Three tiers to converge, then a restore: 30-45 s on this 2-core machine."""
    container = azurite_server.create_container()
    s3 = moto_server.new_tier("s3")
    (tmp_path / "restores").mkdir()
    lab_ = lab(
        [
            posix_tier(tmp_path, "nvme", retention={"keep_last": 1}, delete_delay=0),
            tier_dict(s3),
            azurite_server.tier_yaml("blob", container, block_size="1MiB"),
        ],
        restore={"allowed_roots": [str(tmp_path / "restores")]},
    )
    files = lab_.write_step(1)
    lab_.converge(lambda: lab_.states().get(1, {}).get("blob") == "verified", "step 1 on azure")
    files |= lab_.write_step(2)
    lab_.converge(lambda: lab_.states().get(1, {}).get("nvme") == "deleted", "step 1 off tier 0")
    lab_.converge(lambda: lab_.states().get(2, {}).get("blob") == "verified", "step 2 on azure")
    assert blobs(azurite_server, container) == files

    key = f"{RUN}/step1/__0_0.distcp"
    bad = bytearray(files[key])
    bad[12345] ^= 0x01
    moto_server.client().put_object(Bucket=s3.bucket, Key=key, Body=bytes(bad))  # same size: rot
    done = restored(lab_, 1, tmp_path / "restores" / "one")
    assert (done["state"], done["source_tier"]) == ("done", "s3"), done
    [fallback] = done["fallbacks"]
    assert (fallback["file"], fallback["from_tier"], fallback["to_tier"]) == (
        "__0_0.distcp",
        "s3",
        "blob",
    )
    assert lifecycle.tree(tmp_path / "restores" / "one") == of_step(files, 1)
    assert lab_.daemon.terminate(30) == 0
