"""The pipeline's timings and limits, in one frozen value (defaults for production)."""

from __future__ import annotations

from dataclasses import dataclass

from tierd.daemon.transfer.lease import lease_fence
from tierd.daemon.transfer.retry import FILE_ATTEMPTS, FILE_BACKOFF, INTEGRITY_ATTEMPTS, JOB_BACKOFF, Backoff

__all__ = ["PipelineOptions"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class PipelineOptions:
    """How often the pipeline looks for work, how long a lease lasts, how hard it retries.

    The config file does not expose these: they are tuned for the daemon, and tests
    shorten them.
    """

    #: Seconds between scheduler passes when nobody wakes the pipeline. Whatever creates work
    #: wakes it (a step recorded, a hop ended, a pin, a failed re-check); the poll only
    #: catches retries whose backoff ended and other nodes' changes. An idle daemon's CPU is
    #: mostly this poll: 2 s cost 0.5 % of a core, 10 s about a fifth of that.
    poll_interval: float = 10.0
    #: A running job's lease; another worker may claim the job once it has expired.
    lease_seconds: float = 60.0
    #: How often a running job renews its lease (well inside ``lease_seconds``).
    renew_interval: float = 15.0
    #: How often a running job writes ``bytes_done`` to its replica row.
    progress_interval: float = 0.5
    #: Bytes of transfer buffers the whole daemon may hold at once (the backends' ByteBudget).
    memory_budget: int = 32 * MiB
    #: How often a running job hands freed buffer memory back to the OS (``malloc_trim``).
    trim_interval: float = 5.0
    #: Tries per file for retryable errors (the first try included).
    file_attempts: int = FILE_ATTEMPTS
    #: Tries per file that may end in a checksum mismatch before the mismatch is final.
    integrity_attempts: int = INTEGRITY_ATTEMPTS
    #: Backoff between tries of one file.
    file_backoff: Backoff = FILE_BACKOFF
    #: Backoff before a failed job is tried again on a later pass (``not_before``).
    job_backoff: Backoff = JOB_BACKOFF
    #: Multipart uploads older than this, and not wanted by the catalog, are aborted.
    stale_upload_seconds: float = 24 * 3600.0
    #: Seconds between sweeps for stale multipart uploads.
    stale_sweep_interval: float = 3600.0

    @property
    def fence_seconds(self) -> float:
        """How long a running job goes on without renewing its lease (the catalog is away).

        See ``transfer.lease.lease_fence``: 45 s of the default 60 s lease.
        """
        return lease_fence(self.lease_seconds, self.renew_interval)
