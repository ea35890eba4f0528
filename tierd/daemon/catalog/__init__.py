"""The catalog: checkpoints, files, replicas, jobs and the audit log, in SQL."""

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import CheckpointState, JobKind, JobState, ReplicaState

__all__ = ["CheckpointState", "Database", "JobKind", "JobState", "ReplicaState"]
