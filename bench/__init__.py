"""Benchmarks: each ``bench/bench_*.py`` has a ``main()`` printing one JSON object per benchmark."""
