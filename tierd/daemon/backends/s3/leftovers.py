"""Open multipart uploads that interrupted writes left: listing them by prefix, aborting them.

Two callers: the periodic sweep (``S3Backend.abort_stale_uploads``: everything under the
tier's prefix older than a threshold) and a hop starting (``S3Backend.remove_leftovers``:
the uploads of exactly its own files' keys, whatever their age). Both spare the UploadIds
the catalog means to resume and those the backend is writing right now.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from tierd.daemon.backends.s3.errors import s3_errors
from tierd.daemon.backends.s3.multipart import Multipart
from tierd.errors import NotFound

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

    from tierd.daemon.backends.s3.bodies import TransferSettings

__all__ = ["OpenUpload", "abort_unless_kept", "list_open_uploads", "open_uploads_of", "shared_prefix"]


@dataclass(frozen=True)
class OpenUpload:
    """A multipart upload the store holds open."""

    key: str
    upload_id: str
    initiated: datetime


async def list_open_uploads(client: S3Client, bucket: str, prefix: str) -> list[OpenUpload]:
    """Every open multipart upload whose key starts with ``prefix`` (ListMultipartUploads, paged).

    Raises PermanentBackendError (no such bucket, access denied, not supported) or
    TransientBackendError.
    """
    found: list[OpenUpload] = []
    paginator = client.get_paginator("list_multipart_uploads")
    try:
        with s3_errors("list uploads in", f"s3://{bucket}/{prefix}"):
            async for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                found += [
                    OpenUpload(u["Key"], u["UploadId"], u["Initiated"]) for u in page.get("Uploads", [])
                ]
    except NotFound:
        pass  # rclone serve s3 answers NoSuchUpload when there are none
    return found


def shared_prefix(keys: Collection[str]) -> str:
    """The longest string every key starts with (S3 prefixes are strings, not path components).

    That of the smallest and the largest key in sort order is every key's.
    """
    if not keys:
        return ""
    first, last = min(keys), max(keys)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


async def open_uploads_of(client: S3Client, bucket: str, keys: Collection[str]) -> list[OpenUpload]:
    """The open uploads of exactly these keys: one listing by their shared prefix, then filtered.

    No keys, no request (and an empty list). Raises like ``list_open_uploads``.
    """
    if not keys:
        return []
    wanted = frozenset(keys)
    found = await list_open_uploads(client, bucket, shared_prefix(wanted))
    return [upload for upload in found if upload.key in wanted]


async def abort_unless_kept(
    client: S3Client,
    bucket: str,
    settings: TransferSettings,
    uploads: Sequence[OpenUpload],
    *,
    keep: Collection[str],
    active: set[str],
) -> int:
    """Abort each upload whose UploadId is neither in ``keep`` nor ``active``; returns how many.

    An upload already gone counts as aborted. Raises Transient/PermanentBackendError.
    """
    kept = frozenset(keep)
    aborted = 0
    for upload in uploads:
        # Checked at abort time: an upload started while we listed is active by now.
        if upload.upload_id not in kept and upload.upload_id not in active:
            await Multipart(client, bucket, upload.key, settings, active).abort(upload.key, upload.upload_id)
            aborted += 1
    return aborted
