"""Moving and checking bytes between tiers: the layer the pipeline, restore and scrub share.

``copyset`` (a checkpoint's files on lanes: big files alone, small ones in groups, the
completion marker last and alone) -> ``copier`` (one file, or one group of small files:
throttled, written under a temporary name, verified against the first-sight checksum,
retried). Beside them: ``spec`` (``FileSpec``: a file to copy as the catalog recorded it),
``retry`` (backoff, which errors deserve another try, the file and job retry budgets: see
the README's table), ``throttle`` (bandwidth caps and tier slots by priority), ``lease``
(how long a job copies on without renewing its lease), ``recheck`` (a replica's bytes
re-checked against their first-sight checksums: by deletion, the scrubber and verify).

It sits above the backends and the catalog and below the services: nothing here imports a
service. The object-store tiers (issue 28) and the peer tier (issue 29) extend it, so that
a new way to move bytes lands here rather than in a third copy of it.
"""
