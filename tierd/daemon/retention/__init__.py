"""Decide which checkpoints to keep on each tier, and delete the rest safely.

Pure, no I/O: ``policies`` (keep_last, keep_every_steps, keep_within, keep_best, any of them),
``state`` (what the planner is given; what protects a checkpoint everywhere), ``plan`` (per
tier and replica: keep, delete or blocked, each with its reason), ``eviction`` (what disk
pressure may take, and what blocks the rest).

With I/O: ``snapshot`` (the catalog read once, then planned), ``deleter`` (the one path that
removes a replica's bytes: claim, protection, re-check of a durable copy with
``transfer.recheck``, markers first), ``pressure`` (eviction
below the low mark, reservations), ``service`` (the passes), ``view`` (the plan the API
shows: a dry run), ``store_holds`` (legal holds set on the store's objects, Object Lock).
"""
