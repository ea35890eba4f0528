"""Each integration drives a real (tiny, CPU) training loop against the real daemon."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.job_daemon import JobDaemon, start_job_daemon

RUNS = ("dcp-run", "lightning-run", "hf-run")


@pytest.fixture
def tierd(tmp_path: Path) -> Iterator[JobDaemon]:
    """The daemon, one watched directory per run; only the job's notify records a step."""
    with start_job_daemon(tmp_path / "tierd", RUNS, notify_only=True) as daemon:
        yield daemon
