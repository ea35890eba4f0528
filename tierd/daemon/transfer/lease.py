"""The lease fence: how long a job goes on copying without renewing its lease.

The pipeline's hops and the restores both hold a lease on their job while they copy;
another worker may claim the job once the lease has expired. A worker that cannot renew
(the catalog is away) stops by itself before that can happen, so a job never runs twice
at once.
"""

from __future__ import annotations

__all__ = ["lease_fence"]


def lease_fence(lease_seconds: float, renew_interval: float) -> float:
    """Seconds a job holding a lease goes on without renewing it.

    Counted from when the last renewal that worked was sent, it ends the longer of a renew
    interval and a quarter of the lease before the lease can run out (but never before half
    of it): the job stops before another worker, or this one, may claim it again. 45 s of a
    60 s lease renewed every 15 s.
    """
    return max(min(lease_seconds - renew_interval, lease_seconds * 0.75), lease_seconds / 2)
