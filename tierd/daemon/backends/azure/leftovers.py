"""Blocks that interrupted writes left staged: found by prefix, dropped with their blob.

A blob whose blocks were staged but never committed is listed only with
``include=uncommittedblobs``; the names that listing shows and the plain one does not are
blobs with no committed version, only staged blocks. Their block IDs name the upload
(``blocks.upload_tag``), which is what ``keep`` and the writes in progress are matched on.
Dropping them is Delete Blob (Azurite takes it for an uncommitted blob; the service
otherwise discards staged blocks after seven days, or when a blob of that name is committed).

Staged blocks beside a committed version of the blob (an overwrite killed midway) are not
listed by either call: a later commit of that name discards them, or the seven days do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from tierd.daemon.backends.azure.blocks import parse_block_id
from tierd.daemon.backends.azure.calls import block_lists, delete_blob, list_blobs
from tierd.daemon.backends.azure.rest import AzureRest
from tierd.errors import NotFound

__all__ = ["StagedBlob", "drop_unless_kept", "staged_blobs"]


@dataclass(frozen=True)
class StagedBlob:
    """A blob with staged blocks and no committed version."""

    name: str
    modified: datetime | None


async def staged_blobs(rest: AzureRest, prefix: str, where: str) -> list[StagedBlob]:
    """Every blob under ``prefix`` that has staged blocks only (two listings of the prefix).

    Raises PermanentBackendError (no such container, access denied) or TransientBackendError.
    """
    committed = {blob.name async for blob in list_blobs(rest, prefix, where)}
    return [
        StagedBlob(blob.name, blob.last_modified)
        async for blob in list_blobs(rest, prefix, where, uncommitted=True)
        if blob.name not in committed
    ]


async def _tags(rest: AzureRest, name: str, where: str) -> set[str]:
    """The upload tags of the blob's staged blocks (none: gone meanwhile, or not tierd's)."""
    try:
        _, uncommitted = await block_lists(rest, name, f"{where}{name}", "uncommitted")
    except NotFound:
        return set()
    return {parsed[0] for block in uncommitted if (parsed := parse_block_id(block.id)) is not None}


async def drop_unless_kept(
    rest: AzureRest,
    blobs: Collection[StagedBlob],
    *,
    keep: Collection[str],
    active: set[str],
    where: str,
) -> int:
    """Delete each staged blob none of whose uploads is kept or being written; returns how many.

    Raises Transient/PermanentBackendError.
    """
    kept = frozenset(keep)
    dropped = 0
    for blob in blobs:
        tags = await _tags(rest, blob.name, where)
        if tags & kept or tags & active:
            continue
        with contextlib.suppress(NotFound):
            await delete_blob(rest, blob.name, f"{where}{blob.name}", "drop staged blocks of")
        dropped += 1
    return dropped
