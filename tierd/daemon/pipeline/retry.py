"""Exponential backoff with full jitter, and which errors deserve another try."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tierd.errors import IntegrityError, TierdError

__all__ = ["Backoff", "should_retry"]


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


def should_retry(
    exc: BaseException, tries: int, integrity_tries: int, *, attempts: int, integrity: int
) -> bool:
    """Whether a file whose ``tries``-th try raised ``exc`` gets another try.

    ``integrity_tries`` counts the tries that ended in a checksum mismatch so far
    (including this one); mismatches are retried at most ``integrity`` - 1 times because
    the source may have been read while it was still being written, but a persistent
    mismatch is final. Only tierd errors flagged ``retryable`` are retried.
    """
    if not isinstance(exc, TierdError) or not exc.retryable:
        return False
    if isinstance(exc, IntegrityError) and integrity_tries >= integrity:
        return False
    return tries < attempts
