"""Backoff math and the retry decision."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tierd.config import S3Tier
from tierd.daemon.backends import S3Backend
from tierd.daemon.backends.s3.backend import REQUEST_ATTEMPTS
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.transfer.retry import (
    FAILURE_REASONS,
    FILE_ATTEMPTS,
    FILE_BACKOFF,
    INTEGRITY_ATTEMPTS,
    JOB_BACKOFF,
    Backoff,
    failure_reason,
    should_retry,
)
from tierd.errors import CatalogError, IntegrityError, NoSpace, PermanentBackendError, TransientBackendError


def test_ceiling_doubles_up_to_the_cap() -> None:
    backoff = Backoff(base=0.5, cap=10.0)
    assert [backoff.ceiling(n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.ceiling(10_000) == 10.0  # no overflow for absurd attempt counts


def test_full_jitter_stays_within_zero_and_the_ceiling() -> None:
    backoff = Backoff(base=1.0, cap=30.0)
    rng = random.Random(7)
    for attempt in range(8):
        draws = [backoff.delay(attempt, rng) for _ in range(200)]
        assert all(0.0 <= d <= backoff.ceiling(attempt) for d in draws)
        # full jitter spreads over the whole range, not just near the ceiling
        assert min(draws) < backoff.ceiling(attempt) * 0.1
        assert max(draws) > backoff.ceiling(attempt) * 0.9


def test_delay_is_the_draw_times_the_ceiling() -> None:
    class Fixed(random.Random):
        def random(self) -> float:
            return 0.25

    assert Backoff(base=2.0, cap=100.0).delay(3, Fixed()) == pytest.approx(4.0)


def test_only_retryable_tierd_errors_are_retried() -> None:
    limits = {"attempts": 4, "integrity": 2}
    assert should_retry(TransientBackendError("503"), 1, 0, **limits)
    assert should_retry(TransientBackendError("503"), 3, 0, **limits)
    assert not should_retry(TransientBackendError("503"), 4, 0, **limits)
    assert not should_retry(PermanentBackendError("denied"), 1, 0, **limits)
    assert not should_retry(RuntimeError("bug"), 1, 0, **limits)
    assert not should_retry(NoSpace("No space left on device"), 1, 0, **limits)  # left to the job level


def test_integrity_errors_are_retried_a_bounded_number_of_times() -> None:
    limits = {"attempts": 5, "integrity": 2}
    assert should_retry(IntegrityError("mismatch"), 1, 1, **limits)
    assert not should_retry(IntegrityError("mismatch"), 2, 2, **limits)
    # a transient error after one mismatch still gets its retries
    assert should_retry(TransientBackendError("503"), 2, 1, **limits)


# -- the retries table (docs/retries.md): its numbers are these constants, and the code uses them --


def test_the_pipeline_uses_the_file_and_job_constants() -> None:
    options = PipelineOptions()
    assert options.file_attempts == FILE_ATTEMPTS == 4
    assert options.integrity_attempts == INTEGRITY_ATTEMPTS == 2
    assert options.file_backoff == FILE_BACKOFF == Backoff(base=0.5, cap=20.0)
    assert options.job_backoff == JOB_BACKOFF == Backoff(base=30.0, cap=3600.0)


def test_botocore_sends_a_request_at_most_request_attempts_times() -> None:
    backend = S3Backend(S3Tier(name="s3", kind="s3", bucket="bkt", endpoint_url="http://127.0.0.1:1"))
    config: Any = backend._boto_config()
    retries = config.retries
    assert retries == {"mode": "standard", "total_max_attempts": REQUEST_ATTEMPTS}
    assert REQUEST_ATTEMPTS == 2


def test_the_retries_table_states_the_constants() -> None:
    page = (Path(__file__).parents[3] / "docs" / "retries.md").read_text()
    section = page[page.index("\n## Three levels\n") :]
    section = section[: section.index("\n## ", 1)]
    for stated in (
        f"`REQUEST_ATTEMPTS` = {REQUEST_ATTEMPTS}",
        f"`FILE_ATTEMPTS` = {FILE_ATTEMPTS}",
        f"`INTEGRITY_ATTEMPTS` = {INTEGRITY_ATTEMPTS}",
        f"min({FILE_BACKOFF.base}·2^n, {FILE_BACKOFF.cap:g})",
        f"min({JOB_BACKOFF.base:g}·2^n, {JOB_BACKOFF.cap:g})",
        f"{FILE_ATTEMPTS} \N{MULTIPLICATION SIGN} {REQUEST_ATTEMPTS} = {FILE_ATTEMPTS * REQUEST_ATTEMPTS}",
        f"{FILE_ATTEMPTS} \N{MULTIPLICATION SIGN} (1 + {REQUEST_ATTEMPTS}) = "
        f"{FILE_ATTEMPTS * (1 + REQUEST_ATTEMPTS)}",
    ):
        assert stated in section


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (NoSpace("write /t/x: No space left on device"), "no_space"),
        (IntegrityError("crc mismatch"), "integrity"),
        (PermanentBackendError("access denied"), "permanent"),
        (TransientBackendError("503"), "retryable"),
        (CatalogError("refused"), "retryable"),
        (RuntimeError("a bug"), "retryable"),
    ],
)
def test_a_failed_hop_has_one_of_a_few_reasons(error: Exception, reason: str) -> None:
    assert failure_reason(error) == reason
    assert reason in FAILURE_REASONS


def test_a_job_stops_well_before_its_unrenewed_lease_runs_out() -> None:
    assert PipelineOptions().fence_seconds == 45.0  # of the default 60 s lease, renewed every 15 s
    short = PipelineOptions(lease_seconds=4, renew_interval=0.5)
    assert short.fence_seconds == 3.0  # a quarter of the lease before it runs out
    assert PipelineOptions(lease_seconds=10, renew_interval=8).fence_seconds == 5.0  # never before half
