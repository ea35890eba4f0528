"""A reload's bandwidth limits reach the pipeline's shared buckets (``Limits.retune``)."""

from __future__ import annotations

from pathlib import Path

from tierd.config import PosixTier
from tierd.daemon.pipeline.runner import Limits


def _tiers(tmp_path: Path, *limits: int | None) -> list[PosixTier]:
    return [
        PosixTier(name=f"t{i}", kind="posix", path=tmp_path / f"t{i}", bandwidth_limit=limit)
        for i, limit in enumerate(limits)
    ]


def test_a_cap_changed_set_or_removed(tmp_path: Path) -> None:
    limits = Limits.for_tiers(_tiers(tmp_path, 100, None, 300))
    first = limits.buckets["t0"]
    assert first is not None
    limits.retune(_tiers(tmp_path, 200, 50, None))
    assert limits.buckets["t0"] is first  # the copies in flight pay the same bucket, at the new rate
    assert first.rate == 200
    second = limits.buckets["t1"]
    assert second is not None
    assert second.rate == 50
    assert limits.buckets["t2"] is None
