"""Hops into S3 (PutObject and multipart) through the fault proxy, one fault kind at a time.

A retryable fault ends with the replica verified and the store holding the source's
bytes; a refusal ends ``failed`` with an error naming the store's answer; a fault that
does not stop ends the pass ``failed`` (to be tried again later) after no more sends than
the retries table (docs/retries.md) allows. No case ends verified with other bytes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.faults.hops import LEAN_BOUND, Hops, attempts_over_table, stall_timeouts, upload_world
from tests.fixtures.faultproxy import ACCESS_DENIED, INTERNAL_ERROR, SLOW_DOWN, Fault, Rule
from tests.fixtures.s3servers import S3Server
from tests.integration.daemon_helpers import MiB
from tierd.daemon.transfer.retry import FILE_ATTEMPTS

SIZES = {
    "big.bin": 7 * MiB + 5,  # multipart: two 5 MiB parts
    "small.bin": 100 * 1024,  # one PutObject, with a Content-MD5
    ".metadata": 3000,  # the completion marker
}
SMALL = "*/small.bin"

RETRYABLE = {
    "500 on a PutObject": Rule(INTERNAL_ERROR, operation="PutObject", key=SMALL, nth=1),
    "503 SlowDown on two parts": Rule(SLOW_DOWN, operation="UploadPart", first=2),
    "503 SlowDown on CreateMultipartUpload": Rule(SLOW_DOWN, operation="CreateMultipartUpload", nth=1),
    "500 on CompleteMultipartUpload": Rule(INTERNAL_ERROR, operation="CompleteMultipartUpload", nth=1),
    "reset mid-body of a part": Rule(Fault("reset_request"), operation="UploadPart", nth=1),
    "reset mid-body of a PutObject": Rule(Fault("reset_request"), operation="PutObject", key=SMALL, nth=1),
    "reset mid-answer to CompleteMultipartUpload": Rule(
        Fault("reset_response"), operation="CompleteMultipartUpload", nth=1
    ),
    "truncated answer to a PutObject": Rule(Fault("truncate"), operation="PutObject", key=SMALL, nth=1),
    "truncated answer to a part": Rule(Fault("truncate"), operation="UploadPart", nth=1),
    "stalled answer to a PutObject": Rule(Fault("stall"), operation="PutObject", key=SMALL, nth=1),
    "stalled answer to CompleteMultipartUpload": Rule(
        Fault("stall"), operation="CompleteMultipartUpload", nth=1
    ),
    "wrong checksum in a PutObject answer": Rule(Fault("checksum"), operation="PutObject", key=SMALL, nth=1),
    "wrong checksum in a HeadObject answer": Rule(Fault("checksum"), operation="HeadObject", nth=1),
    "wrong ETag in every PutObject answer": Rule(Fault("etag"), operation="PutObject"),
    "wrong ETag in a part's answer": Rule(Fault("etag"), operation="UploadPart", nth=1),
    "wrong checksum in a part's answer": Rule(Fault("checksum"), operation="UploadPart", nth=1),
}


DROPPING = frozenset({"reset_request", "reset_response", "truncate", "stall"})


def _check_verified(world: Hops, rule: Rule) -> None:
    assert world.stored() == world.data
    assert world.pending_uploads() == []
    assert attempts_over_table(world.proxy, dropped=rule.fault.kind in DROPPING) == {}


@pytest.mark.parametrize("case", list(RETRYABLE))
async def test_retryable_faults_end_verified(
    tmp_path: Path, moto_server: S3Server, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    stall_timeouts(monkeypatch, RETRYABLE[case])
    with upload_world(tmp_path, moto_server, SIZES) as world:
        world.proxy.set_rules([RETRYABLE[case]])
        replica = await world.hop("s3")
        world.proxy.release()
        assert (replica.state, replica.error) == ("verified", None), world.proxy.fired
        assert world.proxy.fired
        _check_verified(world, RETRYABLE[case])


@pytest.mark.parametrize(
    "case",
    [
        "503 SlowDown on two parts",
        "reset mid-body of a PutObject",
        "truncated answer to a part",
        "wrong checksum in a PutObject answer",
        "wrong ETag in every PutObject answer",
        "wrong ETag in a part's answer",
    ],
)
async def test_retryable_faults_end_verified_on_rclone(
    tmp_path: Path, rclone_server: S3Server, case: str
) -> None:
    with upload_world(tmp_path, rclone_server, SIZES) as world:
        world.proxy.set_rules([RETRYABLE[case]])
        replica = await world.hop("s3")
        assert (replica.state, replica.error) == ("verified", None), world.proxy.fired
        assert world.proxy.fired
        _check_verified(world, RETRYABLE[case])


REFUSED = {
    "PutObject": Rule(ACCESS_DENIED, operation="PutObject", key=SMALL),
    "UploadPart": Rule(ACCESS_DENIED, operation="UploadPart"),
    "CreateMultipartUpload": Rule(ACCESS_DENIED, operation="CreateMultipartUpload"),
    "CompleteMultipartUpload": Rule(ACCESS_DENIED, operation="CompleteMultipartUpload"),
}


@pytest.mark.parametrize("operation", list(REFUSED))
async def test_access_denied_fails_at_once_naming_the_answer(
    tmp_path: Path, moto_server: S3Server, operation: str
) -> None:
    with upload_world(tmp_path, moto_server, SIZES) as world:
        world.proxy.set_rules([REFUSED[operation]])
        replica = await world.hop("s3")
        assert replica.state == "failed"
        assert replica.error is not None
        assert "403 AccessDenied" in replica.error
        job = world.job("s3")
        assert (job.state, job.detail["reason"]) == ("failed", "permanent")
        if operation != "PutObject":  # (there, big.bin's upload was cut short, and is kept)
            assert world.pending_uploads() == []  # aborted: the catalog forgets a job failed for good
        # a refusal is not sent again (of two parts in parallel, each at most once)
        sends = Counter(
            tuple(r.query.get("partNumber", [])) for r in world.proxy.requests if r.operation == operation
        )
        assert set(sends.values()) == {1}
        assert set(world.stored()) <= {"big.bin", "small.bin"} - {
            "small.bin" if operation == "PutObject" else "big.bin"
        }


async def test_a_store_that_always_reports_another_checksum_fails_as_integrity(
    tmp_path: Path, moto_server: S3Server
) -> None:
    with upload_world(tmp_path, moto_server, SIZES) as world:
        world.proxy.set_rules([Rule(Fault("checksum"), operation="PutObject", key=SMALL)])
        replica = await world.hop("s3")
        assert replica.state == "failed"
        assert replica.error is not None
        assert "IntegrityError" in replica.error
        assert "small.bin" in replica.error
        assert (world.job("s3").state, world.job("s3").detail["reason"]) == ("failed", "integrity")
        assert "small.bin" not in world.stored()  # what the store said it held differently is deleted
        assert world.proxy.count("PutObject", SMALL) == 2  # INTEGRITY_ATTEMPTS tries


@pytest.mark.parametrize(
    "rule",
    [
        Rule(SLOW_DOWN, operation="PutObject", key=SMALL),
        Rule(Fault("reset_request"), operation="PutObject", key=SMALL),
        Rule(INTERNAL_ERROR, operation="UploadPart"),
    ],
    ids=["503 SlowDown on every PutObject", "reset on every PutObject", "500 on every part"],
)
async def test_a_fault_that_does_not_stop_ends_the_pass_within_the_table(
    tmp_path: Path, moto_server: S3Server, rule: Rule
) -> None:
    with upload_world(tmp_path, moto_server, SIZES) as world:
        world.proxy.set_rules([rule])
        replica = await world.hop("s3")
        assert replica.state == "failed"
        job = world.job("s3")
        assert (job.state, job.detail["reason"]) == ("queued", "retryable")  # tried again after JOB_BACKOFF
        dropped = rule.fault.kind in DROPPING
        assert attempts_over_table(world.proxy, dropped=dropped) == {}
        if rule.operation == "PutObject":
            sends = world.proxy.count("PutObject", SMALL)
            assert FILE_ATTEMPTS <= sends <= LEAN_BOUND * (2 if dropped else 1)
        assert "small.bin" not in world.stored() or rule.operation != "PutObject"
        said = {"reset_request": "Connection reset by peer", "status": rule.fault.name}[rule.fault.kind]
        assert replica.error is not None
        assert said in replica.error
