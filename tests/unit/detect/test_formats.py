"""Every format: half-written and uncommitted steps are never complete; committed ones are."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.detect.helpers import complete, make_spec
from tests.unit.detect.layouts import LAYOUTS, Layout


@pytest.fixture
def tier0(tmp_path: Path) -> Path:
    path = tmp_path / "tier0"
    path.mkdir()
    return path


def _spec_kwargs(layout: Layout, pinned: bool) -> dict[str, object]:
    if layout.name == "marker":
        return {"fmt": "marker" if pinned else "auto", "marker": layout.marker}
    return {"fmt": layout.name if pinned else "auto"}


@pytest.mark.parametrize("pinned", [False, True], ids=["auto", "pinned"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
def test_only_a_committed_step_is_complete(tier0: Path, layout: Layout, pinned: bool) -> None:
    root = tier0 / "job"
    root.mkdir()
    spec = make_spec(root, tier0, **_spec_kwargs(layout, pinned))  # type: ignore[arg-type]

    layout.partial(root, 40)
    assert complete(spec) == [], "a half-written step was taken as complete"
    layout.uncommitted(root, 40)
    assert complete(spec) == [], "a step without its commit signal was taken as complete"
    layout.commit(root, 40)

    found = complete(spec)
    assert len(found) == 1
    (hit,) = found
    assert hit.detector.name == layout.name
    assert hit.step == 40
    assert hit.run == "demo"
    assert hit.candidate.path == layout.path(root, 40)
    assert sorted(f.path for f in hit.verdict.files) == sorted(layout.files(root, 40))


@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
def test_two_steps_side_by_side(tier0: Path, layout: Layout) -> None:
    """The newer step in progress never hides the older committed one, nor borrows its files."""
    root = tier0 / "job"
    root.mkdir()
    spec = make_spec(root, tier0, **_spec_kwargs(layout, pinned=False))  # type: ignore[arg-type]
    layout.uncommitted(root, 10)
    layout.commit(root, 10)
    layout.uncommitted(root, 20)
    steps = sorted(f.step for f in complete(spec))
    assert steps == [10]
    layout.commit(root, 20)
    found = {f.step: f for f in complete(spec)}
    assert sorted(found) == [10, 20]
    assert sorted(f.path for f in found[20].verdict.files) == sorted(layout.files(root, 20))
