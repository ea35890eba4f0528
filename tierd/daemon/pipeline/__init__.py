"""Move verified checkpoints down the chain of tiers.

``service`` (the loop: schedule, sweep, claim, run) -> ``scheduler`` (which hop each
checkpoint needs next, from replica states alone) -> ``runner`` (one claimed hop: source,
progress, lease, outcome) -> ``copyset`` (a hop's files on lanes: big files alone, small
ones in groups, the marker last) -> ``transfer`` (one file: read, hash, write, verify).
Beside them: ``records`` (a hop's catalog transactions), ``resume`` (multipart uploads
recorded so a restart resumes them), ``janitor`` (stale uploads), ``retry`` (the file and
job retry budgets, see the README's table), ``throttle`` (bandwidth caps), ``options``.
"""
