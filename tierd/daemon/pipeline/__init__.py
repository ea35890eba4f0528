"""Move verified checkpoints down the chain of tiers.

``service`` (the loop: schedule, sweep, claim, run) -> ``scheduler`` (which hop each
checkpoint needs next, from replica states alone) -> ``runner`` (one claimed hop: source,
progress, lease, outcome) -> ``tierd.daemon.transfer`` (a hop's files copied and verified,
shared with restore and scrub). Beside them: ``records`` (a hop's catalog transactions),
``resume`` (multipart uploads recorded so a restart resumes them), ``janitor`` (stale
uploads), ``listen`` (PostgreSQL notifications of queued jobs), ``options``.
"""
