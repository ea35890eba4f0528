"""Storage backends: one small interface (``base.Backend``) every tier implements.

``make_backend(tier)`` builds the backend for a tier's config; ``copy_object`` moves one
object between tiers (server-side when the two allow it, else streamed).

``base`` (the interface, ``WriteRequest``, ``WriteBatch``), ``uploads`` (multipart uploads'
state, kept so a restart resumes them), ``budget`` (the memory every buffer comes from),
``concurrency`` (bounded parallelism, blocking calls not cut short), ``hashing``
(CRC64NVME of buffers), ``headfirst`` (a store's reader: the first bytes the opening GET
brought, then ranged GETs), ``ownermeta`` (a file's owner and mode as an object's metadata,
as rclone names them), ``httphead`` (an HTTP/1.1 request head for the clients that write
their own requests), ``httpwire`` (tierd's own HTTP/1.1 connections: GCS's media requests,
Azure's blob GETs and puts), ``posix/``, ``s3/``, ``gcs/`` and ``azure/`` (the stores), ``peer/``
(the peer tier: other nodes' parts held in this node's peer directory).

``s3/`` is imported when a tier needs it (``make_backend``, or ``S3Backend`` looked up here):
aioboto3, botocore, aiohttp and the rest are 20 MB of a daemon's resident memory (128 MB
after importing the daemon, 108 MB without them) that a daemon of POSIX tiers never uses.
``azure/`` likewise: azure-core (its credentials and errors) loads only for an Azure tier; the
data path goes on ``httpwire`` and every other call on tierd's own aiohttp session, without
azure-storage-blob.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tierd.config import AnyTier, AzureTier, GcsTier, PosixTier
from tierd.daemon.backends.base import (
    Backend,
    BytesReader,
    Features,
    ObjectInfo,
    Ownership,
    Progress,
    RangeReader,
    ResumeStore,
    SmallFile,
    Space,
    Verification,
    WriteRequest,
    check_prefix,
    check_relpath,
    copy_object,
)
from tierd.daemon.backends.budget import ByteBudget, default_budget
from tierd.daemon.backends.posix import PosixBackend
from tierd.daemon.backends.uploads import MemoryResumeStore, PartState, UploadState
from tierd.logs import get_logger

if TYPE_CHECKING:
    from tierd.daemon.backends.s3 import S3Backend

log = get_logger(__name__)

__all__ = [
    "Backend",
    "ByteBudget",
    "BytesReader",
    "Features",
    "MemoryResumeStore",
    "ObjectInfo",
    "Ownership",
    "PartState",
    "PosixBackend",
    "Progress",
    "RangeReader",
    "ResumeStore",
    "S3Backend",
    "SmallFile",
    "Space",
    "UploadState",
    "Verification",
    "WriteRequest",
    "check_prefix",
    "check_relpath",
    "copy_object",
    "default_budget",
    "close_backends",
    "make_backend",
]


def make_backend(
    tier: AnyTier, *, budget: ByteBudget | None = None, written_by_jobs: bool = False
) -> Backend:
    """The backend for one tier's config (no I/O happens until it is used).

    Every backend shares ``budget`` (default: the process-wide 64 MiB budget), which
    bounds the bytes all writes hold in memory at once. A POSIX tier ``written_by_jobs``
    (tier 0) refuses to read hard-linked files: another name of one may lie outside it.
    """
    if isinstance(tier, PosixTier):
        return PosixBackend(tier, budget=budget, single_links=written_by_jobs)
    # --- GCS (issue 28): httpx only, imported when a tier is GCS ---
    if isinstance(tier, GcsTier):
        from tierd.daemon.backends.gcs import GcsBackend

        return GcsBackend(tier, budget=budget)
    # --- end GCS ---
    # --- azure (issue 28) ---
    if isinstance(tier, AzureTier):
        from tierd.daemon.backends.azure import AzureBackend  # only when a tier is Azure

        return AzureBackend(tier, budget=budget)
    # --- end azure ---
    from tierd.daemon.backends.s3 import S3Backend  # only when a tier is S3: see above

    return S3Backend(tier, budget=budget)


def __getattr__(name: str) -> Any:
    """``S3Backend``, imported on first use (see the module docstring)."""
    if name == "S3Backend":
        from tierd.daemon.backends.s3 import S3Backend

        return S3Backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def close_backends(backends: Mapping[str, Backend]) -> None:
    """Close each backend; a failure is logged, never raised (closing is best effort at exit)."""
    for backend in backends.values():
        try:
            await backend.close()
        except Exception as exc:
            log.warning("backend_close_failed", tier=backend.name, error=str(exc))
