"""Benchmarks: each ``bench/bench_*.py`` has a ``main()`` printing one JSON object per benchmark.

What they share: ``common`` (results, settings, peak memory), ``harness`` (settings, page
cache, timed commands), ``datasets`` (the checkpoints), ``hop`` (the daemon running one hop),
``results`` (spread, CPU, peaks, the order of the rounds), ``sides`` (this tree and the one
``--against`` names; ``record_catalog`` records a checkpoint with either), ``s3endpoint``
(``rclone serve s3``), ``stacks`` (py-spy's stacks side by side); beside them the helpers of
single benchmarks (``api_clients``, ``fleet_api``, ``retention_catalog``, ``retention_idle``).
"""
