"""Small helpers shared by the detection tests."""

from __future__ import annotations

from pathlib import Path

from tierd.config import WatchConfig
from tierd.daemon.detect.scan import Found, RootSpec, scan_root


class NothingKnown:
    """A Known that has recorded nothing."""

    def has_path(self, relpath: str) -> bool:
        return False

    def has_step(self, run: str, step: int) -> bool:
        return False


def make_spec(root: Path, tier0: Path, fmt: str = "auto", **kw: object) -> RootSpec:
    """A RootSpec for ``root`` inside ``tier0`` (run ``demo`` unless run_pattern is given)."""
    if "run_pattern" not in kw:
        kw.setdefault("run", "demo")
    return RootSpec.of(WatchConfig(path=root, format=fmt, **kw), tier0)


def complete(spec: RootSpec) -> list[Found]:
    """The complete candidates a full scan finds."""
    return [f for f in scan_root(spec, NothingKnown()) if f.verdict.complete]
