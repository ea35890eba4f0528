"""One APIRouter per resource.

- ``checkpoints`` list and inspect checkpoints; record one a training job announces (notify)
- ``runs``        what a training job asks at start-up to resume
- ``tiers``       what each tier holds and how full it is; reservations of room before a save
- ``jobs``        jobs in flight: copies, replicas being deleted, restores
- ``restores``    start a restore, follow it, cancel it
- ``verify``      re-check every replica of a checkpoint now
- ``retention``   the retention plan per tier: kept, deleted, blocked, and why
- ``audit``       the audit log
- ``fleet``       every daemon on this catalog and who leads the shared tiers
- ``peer``        other nodes' parts held here: put, get, head, delete (the ``peer`` role only)
- ``usage``       what each tier holds and costs, what retention saved, in 30 days
- ``health``      liveness and readiness
- ``metrics``     Prometheus exposition at ``/metrics``
"""
