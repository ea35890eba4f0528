"""What a restore gives each file and directory: the recorded owner and mode, or the owner asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierd.daemon.backends.base import Ownership
from tierd.daemon.catalog.ownership import RecordedDirectory
from tierd.daemon.catalog.restores import RestoreClaim, RestoreFile, RestorePlan
from tierd.daemon.restore.destination import Layout
from tierd.daemon.restore.owners import owners_of_directories, restored_owner

DIRECTORIES = (
    RecordedDirectory("demo", 0, 0, 0o755),
    RecordedDirectory("demo/step_1", 1234, 1234, 0o750),
    RecordedDirectory("demo/step_1/sub", 1234, 1234, 0o700),
    RecordedDirectory("demo/step_10", 1234, 1234, 0o777),  # another step's directory beside it
)


def plan() -> RestorePlan:
    claim = RestoreClaim(1, 1, 0, {})
    return RestorePlan(claim, "demo/step_1", "dcp", (), frozenset({"nvme"}), directories=DIRECTORIES)


def test_a_file_keeps_its_recorded_owner_or_takes_the_one_asked_for() -> None:
    recorded = RestoreFile(1, "demo/step_1/a", 1, "c", 0, 1234, 1234, 0o640)
    unrecorded = RestoreFile(2, "demo/step_1/b", 1, "c", 0)
    assert restored_owner(recorded, None) == Ownership(1234, 1234, 0o640)
    assert restored_owner(unrecorded, None) is None
    assert restored_owner(recorded, (5, 6)) == Ownership(5, 6, 0o640)
    assert restored_owner(unrecorded, (5, 6)) == Ownership(5, 6, 0o600)  # never wider than unknown


def test_into_a_target_the_checkpoint_directory_is_the_target() -> None:
    target = Path("/restores/x")
    layout = Layout(target, target, "demo/step_1", {})
    assert owners_of_directories(plan(), layout, None) == {
        "": Ownership(1234, 1234, 0o750),
        "sub": Ownership(1234, 1234, 0o700),
    }
    assert owners_of_directories(plan(), layout, (5, 6)) == {
        "": Ownership(5, 6, 0o750),
        "sub": Ownership(5, 6, 0o700),
    }


@pytest.mark.parametrize("given", [None, (5, 6)])
def test_to_tier0_every_directory_keeps_its_path(given: tuple[int, int] | None) -> None:
    tier0 = Path("/nvme")
    layout = Layout(tier0, tier0 / "demo/step_1", "", {})
    owners = owners_of_directories(plan(), layout, given)
    assert list(owners) == ["demo", "demo/step_1", "demo/step_1/sub", "demo/step_10"]
    uid, gid = given or (1234, 1234)
    assert owners["demo/step_1"] == Ownership(uid, gid, 0o750)
    assert owners["demo"] == Ownership(*(given or (0, 0)), 0o755)
