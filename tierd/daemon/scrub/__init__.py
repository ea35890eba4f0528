"""Scrubbing: re-checking verified replicas' bytes, on a schedule and on demand.

- ``service``  the scrubber: re-checks every verified replica on a tier once per ``scrub.every``
- ``check``    one replica's re-check and what follows, shared by the scrubber and a verify call
"""

from tierd.daemon.scrub.check import ReplicaChecker
from tierd.daemon.scrub.service import ScrubService

__all__ = ["ReplicaChecker", "ScrubService"]
