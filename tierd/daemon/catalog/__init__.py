"""The catalog: checkpoints, files, replicas, jobs and the audit log, in SQL.

Every query of tierd lives in this package; services (detect, pipeline, metrics, api)
call the named functions below and never build SQL themselves. A function that is a
transaction of its own takes a ``Database``; one that is a step of a larger transaction
takes the caller's ``Session`` (and, where it changes a row, the loaded row).

- ``db``          engine and sessions for SQLite and PostgreSQL (``Database``)
- ``models``      the tables, the state enums, ``utcnow``
- ``migrate``     schema migrations (Alembic): upgrade, check
- ``dialect``     every SQLite/PostgreSQL difference: SKIP LOCKED, ON CONFLICT, advisory locks
- ``checkpoints`` runs, checkpoints and files: record, look up, list (the API's queries)
- ``replicas``    a checkpoint's copy on each tier: add, find, mark copying/verified/failed/deleted
- ``parts``       a step's parts (one per node), what the step expects, when it is complete
- ``part_replicas`` each part's copy on each tier, and the step's replica they settle
- ``peer_copies`` each part's copies on other nodes' peer tiers; since when a step is safe
- ``peer_reads`` what a restore reads from peers: verified copies and their holders, a bad one failed
- ``jobs``        copy jobs and their leases: enqueue, claim (SKIP LOCKED), renew, release, requeue, end
- ``progress``    a running hop's progress: files finished (``job_files_done``), bytes copied
- ``uploads``     S3 multipart uploads in flight and their parts (resume, janitor)
- ``scheduling``  the scheduler's reads (checkpoints with a hop to plan) and its cross-daemon lock
- ``protection``  pins, legal holds and metrics of one checkpoint, each with its audit event
- ``replica_deletions`` two-phase deletion of replicas: schedule (batched), undelete, claim, finish
- ``part_deletions`` each node deleting its own part of a step that spans nodes
- ``mismatches``  a replica whose bytes a re-check found bad: failed, audited, copied again
- ``retention``   what a retention pass reads (one query per table) and its change marker
- ``audit``       the append-only audit log: append, list
- ``stats``       totals for the metrics scrape: replicas by tier and state, jobs, waiting steps
- ``fleet``       nodes' heartbeats and the shared tiers' leader lease (database clock), the fleet's jobs
- ``inflight``    what is in flight: copy jobs queued or running, replicas being deleted
- ``ownership``   owners and modes recorded at first sight, of each file and directory
- ``recording``   who records a step on a shared tier 0, so not every daemon hashes it
- ``restores``    restore jobs (``jobs`` rows of kind ``restore``): leases and audit events
- ``runs``        runs as a training job sees them: their newest complete step, overall and per tier
- ``scrub``       the scrubber's reads and writes: replicas due for a re-check, its progress
- ``usage``       the usage report's aggregates: bytes per tier and run, cadence, retention's deletions
- ``store_holds`` legal holds on the store's objects (Object Lock): which replicas are due, recording them
"""

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import CheckpointState, JobKind, JobState, ReplicaState

__all__ = ["CheckpointState", "Database", "JobKind", "JobState", "ReplicaState"]
