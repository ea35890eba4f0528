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

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from azure.storage.blob.aio import ContainerClient

from tierd.daemon.backends.azure.blocks import parse_block_id
from tierd.daemon.backends.azure.errors import azure_errors
from tierd.errors import NotFound

__all__ = ["StagedBlob", "drop_unless_kept", "staged_blobs"]


@dataclass(frozen=True)
class StagedBlob:
    """A blob with staged blocks and no committed version."""

    name: str
    modified: datetime | None


async def staged_blobs(container: ContainerClient, prefix: str, where: str) -> list[StagedBlob]:
    """Every blob under ``prefix`` that has staged blocks only (two listings of the prefix).

    Raises PermanentBackendError (no such container, access denied) or TransientBackendError.
    """
    with azure_errors("list staged blobs in", where):
        committed = {blob.name async for blob in container.list_blobs(name_starts_with=prefix)}
        found = [
            StagedBlob(blob.name, blob.last_modified)
            async for blob in container.list_blobs(name_starts_with=prefix, include=["uncommittedblobs"])
            if blob.name not in committed
        ]
    return found


async def _tags(container: ContainerClient, name: str, where: str) -> set[str]:
    """The upload tags of the blob's staged blocks (none: gone meanwhile, or not tierd's)."""
    try:
        with azure_errors("list blocks of", where):
            _, uncommitted = await container.get_blob_client(name).get_block_list("uncommitted")
    except NotFound:
        return set()
    return {parsed[0] for block in uncommitted if (parsed := parse_block_id(str(block.id))) is not None}


async def drop_unless_kept(
    container: ContainerClient,
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
        tags = await _tags(container, blob.name, where)
        if tags & kept or tags & active:
            continue
        try:
            with azure_errors("drop staged blocks of", f"{where}{blob.name}"):
                await container.get_blob_client(blob.name).delete_blob()
        except NotFound:
            pass
        dropped += 1
    return dropped
