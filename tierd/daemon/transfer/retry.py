"""Exponential backoff with full jitter, which errors deserve another try, and how often.

Retries happen at three levels (the README's "Retries" table): a request (botocore,
``tierd.daemon.backends.s3.backend.REQUEST_ATTEMPTS``), a file (``FILE_ATTEMPTS`` tries,
``FILE_BACKOFF`` between them) and a job (a failed pass is queued again after
``JOB_BACKOFF``). ``PipelineOptions`` takes its defaults from these numbers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tierd.errors import IntegrityError, NoSpace, PermanentBackendError, TierdError

__all__ = [
    "FAILURE_REASONS",
    "FILE_ATTEMPTS",
    "FILE_BACKOFF",
    "INTEGRITY_ATTEMPTS",
    "JOB_BACKOFF",
    "Backoff",
    "failure_reason",
    "should_retry",
]


@dataclass(frozen=True)
class Backoff:
    """Delays that double from ``base`` up to ``cap``, drawn uniformly below that ceiling."""

    base: float
    cap: float

    def ceiling(self, attempt: int) -> float:
        """The largest delay after failed try number ``attempt`` (0 for the first failure)."""
        return min(self.cap, self.base * float(1 << min(attempt, 62)))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A delay in [0, ceiling(attempt)] ("full jitter": spreads retries of many workers)."""
        # Not for security: jitter only spreads load.
        draw = rng.random() if rng is not None else random.random()  # noqa: S311
        return draw * self.ceiling(attempt)


#: Tries of one file in one pass for retryable errors, the first try included.
FILE_ATTEMPTS = 4
#: Of those, tries that may end in a checksum mismatch before the mismatch is final.
INTEGRITY_ATTEMPTS = 2
#: Between tries of one file.
FILE_BACKOFF = Backoff(base=0.5, cap=20.0)
#: Before a pass that failed with a retryable error is tried again (the job's ``not_before``).
JOB_BACKOFF = Backoff(base=30.0, cap=3600.0)


#: Why a hop failed, as recorded in the job and counted in ``tierd_transfer_failures_total``:
#: a bounded set, so it can be a metric label.
FAILURE_REASONS = ("no_space", "integrity", "permanent", "retryable")


def failure_reason(exc: BaseException) -> str:
    """One of FAILURE_REASONS for the error that ended a hop.

    ``integrity`` and ``permanent`` end the job; ``no_space`` (the destination is full:
    retention, eviction or an operator may free space) and ``retryable`` are tried again after
    ``JOB_BACKOFF``. Anything that is not a tierd error counts as ``retryable``.
    """
    if isinstance(exc, IntegrityError):
        return "integrity"
    if isinstance(exc, PermanentBackendError):
        return "permanent"
    if isinstance(exc, NoSpace):
        return "no_space"
    return "retryable"


def should_retry(
    exc: BaseException, tries: int, integrity_tries: int, *, attempts: int, integrity: int
) -> bool:
    """Whether a file whose ``tries``-th try raised ``exc`` gets another try.

    ``integrity_tries`` counts the tries that ended in a checksum mismatch so far
    (including this one); mismatches are retried at most ``integrity`` - 1 times because
    the source may have been read while it was still being written, but a persistent
    mismatch is final. Only tierd errors flagged ``retryable`` are retried, and a full
    destination (NoSpace) not at this level: space seldom returns within seconds, and each
    try would fill the file system again for everyone on it; the job is tried again after
    ``JOB_BACKOFF``.
    """
    if not isinstance(exc, TierdError) or not exc.retryable or isinstance(exc, NoSpace):
        return False
    if isinstance(exc, IntegrityError) and integrity_tries >= integrity:
        return False
    return tries < attempts
