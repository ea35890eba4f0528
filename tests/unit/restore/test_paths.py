"""Where a restore may write: every refused target, and catalog names that would escape it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierd.daemon.beneath import Root
from tierd.daemon.restore.paths import check_target, is_fresh, local_names
from tierd.errors import RestoreRefused


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "allowed").mkdir()
    (tmp_path / "outside").mkdir()
    return tmp_path / "allowed"


def test_a_missing_or_empty_directory_inside_a_root_is_taken(root: Path) -> None:
    assert check_target(str(root / "new" / "dir"), [root], overwrite=False) == root / "new" / "dir"
    (root / "empty").mkdir()
    assert check_target(str(root / "empty"), [root], overwrite=False) == root / "empty"
    assert is_fresh(Root(root, ("empty",)))
    assert is_fresh(Root(root, ("missing",)))


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("relative/dir", "not an absolute path"),
        ("{root}/../outside/x", "'..'"),
        ("{outside}/x", "outside the allowed roots"),
        ("{root}/link/x", "through a symlink"),
        ("{root}/full", "not an empty directory"),
        ("{root}/file", "exists and is not a directory"),
        ("{root}/" + "n" * 300, "cannot inspect"),
    ],
)
def test_refused_targets(root: Path, target: str, says: str) -> None:
    outside = root.parent / "outside"
    (root / "link").symlink_to(outside)
    (root / "full").mkdir()
    (root / "full" / "a").write_bytes(b"x")
    (root / "file").write_bytes(b"x")
    wanted = target.format(root=root, outside=outside)
    if says == "cannot inspect":
        (root / ("n" * 300)).parent.mkdir(exist_ok=True)
    with pytest.raises(RestoreRefused, match=says):
        check_target(wanted, [root], overwrite=False)


def test_overwrite_takes_a_non_empty_directory_but_never_a_file(root: Path) -> None:
    (root / "full").mkdir()
    (root / "full" / "a").write_bytes(b"x")
    assert check_target(str(root / "full"), [root], overwrite=True) == root / "full"
    (root / "file").write_bytes(b"x")
    with pytest.raises(RestoreRefused, match="not a directory"):
        check_target(str(root / "file"), [root], overwrite=True)


def test_a_symlink_to_inside_a_root_is_followed(root: Path) -> None:
    (root / "real").mkdir()
    (root / "alias").symlink_to(root / "real")
    assert check_target(str(root / "alias"), [root], overwrite=False) == root / "real"


def test_names_relative_to_the_checkpoint() -> None:
    names = local_names("run/step1", ["run/step1/a", "run/step1/sub/b"])
    assert names == {"run/step1/a": "a", "run/step1/sub/b": "sub/b"}
    assert local_names("run/model.pt", ["run/model.pt"]) == {"run/model.pt": "model.pt"}


@pytest.mark.parametrize("relpath", ["/etc/passwd", "run/step1/../../x", "run/other/a", "run/step1//a"])
def test_catalog_names_that_escape_are_refused(relpath: str) -> None:
    with pytest.raises(RestoreRefused):
        local_names("run/step1", [relpath])
