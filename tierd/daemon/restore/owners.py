"""Who owns what a restore writes: the owner, group and mode recorded at first sight, or the request's.

A restore that names an ``owner`` gives every file and directory it makes that owner and
group, with the recorded modes (never wider than ``UNRECORDED_FILE_MODE`` or
``UNRECORDED_DIR_MODE`` where none was recorded); otherwise each gets what was recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierd.daemon.backends.base import Ownership, recorded_owner
from tierd.daemon.catalog.restores import RestoreFile, RestorePlan
from tierd.daemon.restore.destination import Layout

__all__ = [
    "UNRECORDED_DIR_MODE",
    "UNRECORDED_FILE_MODE",
    "given_owner",
    "owners_of_directories",
    "restored_owner",
]


#: What a file (a directory) given to a requested owner gets when its mode was never recorded.
UNRECORDED_FILE_MODE = 0o600
UNRECORDED_DIR_MODE = 0o700


def given_owner(detail: Mapping[str, Any]) -> tuple[int, int] | None:
    """The (uid, gid) the request gives the restored tree to, or None."""
    owner = detail.get("owner")
    return None if not owner else (int(owner["uid"]), int(owner["gid"]))


def restored_owner(file: RestoreFile, given: tuple[int, int] | None) -> Ownership | None:
    """A restored file's owner: as recorded, or the ``given`` owner with the recorded mode."""
    recorded = recorded_owner(file.uid, file.gid, file.mode)
    if given is None:
        return recorded
    return Ownership(*given, recorded.mode if recorded is not None else UNRECORDED_FILE_MODE)


def owners_of_directories(
    plan: RestorePlan, layout: Layout, given: tuple[int, int] | None
) -> dict[str, Ownership]:
    """Each recorded directory the restore may create, by its name under ``layout.root``, parents first.

    With ``given``, every one (and the target itself, recorded or not) goes to that owner.
    """
    owners: dict[str, Ownership] = {}
    if given is not None and layout.target == layout.root:
        owners[""] = Ownership(*given, UNRECORDED_DIR_MODE)
    for recorded in plan.directories:
        name = layout.directory_name(recorded.relpath)
        if name is not None:
            owners[name] = Ownership(*(given or (recorded.uid, recorded.gid)), recorded.mode)
    return owners
