"""Everything that runs on the node.

Subpackages:

- ``detect/``    detect completed checkpoint steps in watched directories
- ``catalog/``   checkpoints, files, replicas, jobs and the audit log, in SQL
- ``pipeline/``  move verified checkpoints down the chain of tiers
- ``transfer/``  moving and checking bytes between tiers (shared by pipeline, restore and scrub)
- ``backends/``  storage backends: one interface (``base.Backend``) every tier implements
- ``retention/`` which checkpoints each tier keeps, and deleting the rest safely
- ``restore/``   put a checkpoint back from the nearest tier holding a verified copy
- ``scrub/``     re-checking verified replicas' bytes, on a schedule and on demand
- ``replication/`` copying this node's parts of each step to other nodes' peer tiers
- ``fleet/``     many daemons on one PostgreSQL catalog: heartbeats, the shared tiers' leader
- ``metrics/``   Prometheus metrics: counters the services bump, gauges read at scrape

Modules:

- ``runtime``    ``tierd run``: one asyncio process hosting every service and the HTTP server
- ``context``    what every service shares: config, catalog, and a few signals between them
- ``service``    the lifecycle every long-lived service follows
- ``tierview``   what ``GET /v1/tiers`` shows of each tier
- ``usage``      what ``GET /v1/usage`` shows: bytes and cost per tier, storage class and run, in 30 days
- ``outage``     noticing the catalog went away and came back
- ``aio``        the one place blocking work leaves the event loop
- ``checksum``   CRC64-NVME file checksums, taken once and carried through every hop
- ``markers``    completion markers: files whose presence says a checkpoint is complete
- ``beneath``    directory trees tierd writes into, reached only through directory descriptors
- ``nofollow``   opening a tier's files for reading: no symlink followed, no FIFO waited on
- ``libc``       the C library through ctypes, for the few calls ``os`` lacks
- ``sdnotify``   systemd's notify protocol over ``$NOTIFY_SOCKET``
- ``hangups``    SIGHUP for the process's whole life: kept while starting, ignored while stopping
"""
