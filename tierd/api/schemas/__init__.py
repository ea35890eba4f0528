"""The API's JSON shapes, in and out, one module per resource.

Field names and state values are a contract scripts rely on. A schema only converts: what it
shows is fetched before (by the route, through the catalog, or built on the daemon side as a
view), and it sends no query itself.

- ``common``      the bounds of numbers the catalog stores (``BIGINT_MAX``, ``INTEGER_MAX``), the error body
- ``health``      ``/livez``, ``/healthz`` and ``/readyz``
- ``checkpoints`` a notify; a step with its replicas, parts, files and directories; pins, holds, metrics
- ``runs``        each run and its newest verified step per tier
- ``tiers``       each tier (space, pressure, replicas, scrub) and reservations of room
- ``retention``   the retention plan
- ``verify``      a checkpoint re-checked on every tier; the look at tier 0
- ``restores``    a restore's request, state and progress
- ``jobs``        copies, deletions and restores in flight
- ``audit``       the audit log
- ``fleet``       the nodes of a fleet and its leader
- ``peer``        a file held for another node, and a removal
- ``usage``       bytes and cost per tier, storage class and run, retention's savings, in 30 days
"""
