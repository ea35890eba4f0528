"""Holds the store enforces, end to end: ``tierd hold`` sets S3 Object Lock legal holds; release clears them.

The real daemon (config file, CLI) over a POSIX tier 0, then with an S3 tier 1 on moto's
server whose bucket has Object Lock, a storage class and SSE-S3. The hold is placed before
the bucket is a tier at all, so its objects get their legal hold after they are copied; a
direct boto3 delete of a held version is refused by the store; ``tierd release`` turns the
holds OFF and the same delete then works. (About 15 s on an idle machine, 60 s at a load of 16:
two daemon starts, a migration and a stop.)
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.fixtures import http
from tests.fixtures.daemon import Daemon, run_cli
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import config_dict, tier_dict, wait_for, write_files

RUN = "demo"
#: A small DCP step; the shard past the tier's 5 MiB parts goes up as a multipart upload.
STEP_FILES = {"__0_0.distcp": 6 * 1024 * 1024, "__1_0.distcp": 64 * 1024 - 5, ".metadata": 2048}


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Prepare a daemon over ``tmp_path`` (and start it, waiting until ready); stopped at the end."""
    made: list[Daemon] = []

    def make(data: dict[str, Any], *, start: bool = True) -> Daemon:
        daemon = Daemon.prepare(tmp_path, data)
        made.append(daemon)
        daemon.start()
        if start:
            daemon.wait_ready(30)
        return daemon

    yield make
    for daemon in made:
        daemon.stop()


def locked_bucket(server: S3Server) -> str:
    name = f"tierd-lock-{secrets.token_hex(6)}"
    server.client().create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


def legal_holds(server: S3Server, bucket: str) -> dict[str, str]:
    """Each object's legal hold status (OFF where it never had one)."""
    client = server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    status = {}
    for key in keys:
        try:
            hold = client.get_object_legal_hold(Bucket=bucket, Key=key)["LegalHold"]
        except ClientError:
            hold = {}
        status[key] = hold.get("Status", "OFF")
    return status


def checkpoints(base: str) -> list[dict[str, Any]]:
    answer = http.get(f"{base}/v1/checkpoints", params={"run": RUN}, timeout=10)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def test_tierd_hold_sets_the_stores_legal_hold_and_release_clears_it(
    launch: Callable[..., Daemon], tmp_path: Path, moto_server: S3Server
) -> None:
    bucket = locked_bucket(moto_server)
    s3 = moto_server.new_tier("s3", bucket=bucket)
    (tmp_path / "nvme" / RUN).mkdir(parents=True)
    nvme = {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")}
    locked = tier_dict(s3) | {
        "storage_class": "STANDARD_IA",
        "server_side_encryption": "AES256",
        "object_lock": True,
    }
    watch = [{"path": str(tmp_path / "nvme" / RUN), "run": RUN, "format": "dcp"}]
    settings = {"watch": watch, "retention": {"interval": 0.5}}
    first = launch(config_dict(tmp_path, [nvme], **settings))  # the bucket is not a tier yet
    write_files(tmp_path / "nvme" / RUN / "step1", STEP_FILES, seed=1)
    wait_for(lambda: checkpoints(first.url), 30, "the step to be recorded")
    hold = ["hold", f"{RUN}:1", "--name", "case-9", "--reason", "litigation", "--url", first.url]
    code, out = run_cli(hold, tmp_path / "cli.log")
    assert code == 0, out
    first.stop()

    daemon = launch(config_dict(tmp_path, [nvme, locked], **settings))  # copied there after the hold
    keys = {f"{RUN}/step1/{name}" for name in STEP_FILES}
    wait_for(lambda: legal_holds(moto_server, bucket) == dict.fromkeys(keys, "ON"), 60, "every object held")
    client = moto_server.client()
    for key in keys:
        head = client.head_object(Bucket=bucket, Key=key)
        assert (head["StorageClass"], head["ServerSideEncryption"]) == ("STANDARD_IA", "AES256")
        with pytest.raises(ClientError, match="AccessDenied"):
            client.delete_object(Bucket=bucket, Key=key, VersionId=head["VersionId"])

    code, out = run_cli(
        ["release", f"{RUN}:1", "--name", "case-9", "--url", daemon.url], tmp_path / "cli.log"
    )
    assert code == 0, out
    wait_for(lambda: legal_holds(moto_server, bucket) == dict.fromkeys(keys, "OFF"), 60, "every hold cleared")
    for key in keys:
        version = client.head_object(Bucket=bucket, Key=key)["VersionId"]
        client.delete_object(Bucket=bucket, Key=key, VersionId=version)
    sets = [(e["legal_hold"], e["objects"]) for e in daemon.events() if e.get("event") == "store_hold_set"]
    assert sets == [("ON", 3), ("OFF", 3)]  # each sent once: what was set is recorded


def test_a_bucket_without_object_lock_stops_the_start_naming_the_tier(
    launch: Callable[..., Daemon], tmp_path: Path, moto_server: S3Server
) -> None:
    s3 = moto_server.new_tier("s3")
    tiers = [
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme")},
        tier_dict(s3) | {"object_lock": True},
    ]
    (tmp_path / "nvme").mkdir()
    daemon = launch(config_dict(tmp_path, tiers), start=False)
    assert daemon.wait(60) != 0
    assert f"tier s3: object_lock: true, but bucket {s3.bucket} has no Object Lock enabled" in daemon.tail()
