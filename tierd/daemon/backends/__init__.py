"""Storage backends: one small interface (``base.Backend``) every tier implements.

``make_backend(tier)`` builds the backend for a tier's config; ``copy_object`` moves one
object between tiers (server-side when the two allow it, else streamed).
"""

from __future__ import annotations

from tierd.config import PosixTier, S3Tier
from tierd.daemon.backends.base import (
    Backend,
    BytesReader,
    Features,
    MemoryResumeStore,
    ObjectInfo,
    PartState,
    Progress,
    RangeReader,
    ResumeStore,
    SmallFile,
    UploadState,
    Verification,
    check_prefix,
    check_relpath,
    copy_object,
)
from tierd.daemon.backends.budget import ByteBudget, default_budget
from tierd.daemon.backends.posix import PosixBackend
from tierd.daemon.backends.s3 import S3Backend

__all__ = [
    "Backend",
    "ByteBudget",
    "BytesReader",
    "Features",
    "MemoryResumeStore",
    "ObjectInfo",
    "PartState",
    "PosixBackend",
    "Progress",
    "RangeReader",
    "ResumeStore",
    "S3Backend",
    "SmallFile",
    "UploadState",
    "Verification",
    "check_prefix",
    "check_relpath",
    "copy_object",
    "default_budget",
    "make_backend",
]


def make_backend(tier: PosixTier | S3Tier, *, budget: ByteBudget | None = None) -> Backend:
    """The backend for one tier's config (no I/O happens until it is used).

    Every backend shares ``budget`` (default: the process-wide 64 MiB budget), which
    bounds the bytes all writes hold in memory at once.
    """
    if isinstance(tier, PosixTier):
        return PosixBackend(tier, budget=budget)
    return S3Backend(tier, budget=budget)
