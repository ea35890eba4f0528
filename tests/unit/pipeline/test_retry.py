"""Backoff math and the retry decision."""

from __future__ import annotations

import random

import pytest

from tierd.daemon.pipeline.retry import Backoff, should_retry
from tierd.errors import IntegrityError, PermanentBackendError, TransientBackendError


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


def test_integrity_errors_are_retried_a_bounded_number_of_times() -> None:
    limits = {"attempts": 5, "integrity": 2}
    assert should_retry(IntegrityError("mismatch"), 1, 1, **limits)
    assert not should_retry(IntegrityError("mismatch"), 2, 2, **limits)
    # a transient error after one mismatch still gets its retries
    assert should_retry(TransientBackendError("503"), 2, 1, **limits)
