"""Jobs in flight: copies between tiers, replicas being deleted, restores."""

from __future__ import annotations

from fastapi import APIRouter

from tierd.api.deps import Reader, ReadSessionDep
from tierd.api.problems import ProblemRoute
from tierd.api.schemas.jobs import CopyJobOut, DeletionOut, JobsOut
from tierd.api.schemas.restores import RestoreOut
from tierd.daemon.catalog import inflight, restores
from tierd.daemon.catalog.restores import OPEN

__all__ = ["router"]

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=ProblemRoute)


@router.get("", operation_id="listJobs")
def jobs(session: ReadSessionDep, _caller: Reader) -> JobsOut:
    """Copies queued or running, replicas in ``deleting``, restores queued or running."""
    return JobsOut(
        copies=[CopyJobOut(**vars(c)) for c in inflight.copies_in_flight(session)],
        deletions=[DeletionOut(**vars(d)) for d in inflight.deletions_in_flight(session)],
        restores=[RestoreOut.of(r) for r in restores.list_restores(session, states=OPEN, limit=1000)],
    )
