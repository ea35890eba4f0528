"""Scrubbing: re-checking verified replicas' bytes, on a schedule and on demand."""

from tierd.daemon.scrub.check import ReplicaChecker
from tierd.daemon.scrub.service import ScrubService

__all__ = ["ReplicaChecker", "ScrubService"]
