"""The tiers' configuration: each tier's kind, limits, retention, free-space marks and scrub."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ByteSize, Field, SecretStr, field_validator, model_validator

from tierd.config.values import Duration, Space, Strict
from tierd.errors import ConfigError

__all__ = [
    "FreeSpace",
    "GCS_MAX_NAME_BYTES",
    "GcsTier",
    "KeepBestConfig",
    "Price",
    "S3_ARCHIVE_CLASSES",
    "S3_MAX_KEY_BYTES",
    "S3StorageClass",
    "PosixTier",
    "S3Tier",
    "ScrubConfig",
    "TierBase",
    "TierConfig",
    "TierRetention",
]


class FreeSpace(Strict):
    """Disk-pressure marks of a POSIX tier: evict below ``evict_below`` free, up to ``evict_to``."""

    evict_below: Space
    evict_to: Space

    @model_validator(mode="after")
    def _to_above_below(self) -> FreeSpace:
        below, to = self.evict_below, self.evict_to
        if below.percent == to.percent and to.value <= below.value:
            raise ValueError(f"evict_to ({to}) must leave more free space than evict_below ({below})")
        return self

    def marks(self, total_bytes: int) -> tuple[int, int]:
        """``(evict_below, evict_to)`` in bytes on a file system of ``total_bytes``.

        Raises ConfigError when, on this file system, evict_to is not above evict_below (a
        percent and a size mixed can only be compared once the size is known).
        """
        low, high = self.evict_below.bytes_of(total_bytes), self.evict_to.bytes_of(total_bytes)
        if high <= low:
            raise ConfigError(
                [
                    f"free_space: evict_to ({self.evict_to}) is {high} bytes, not more than "
                    f"evict_below ({self.evict_below}) = {low} bytes of {total_bytes}"
                ]
            )
        return low, high


class KeepBestConfig(Strict):
    """``keep_best``: the ``n`` best checkpoints of each run by ``metric`` (lowest for ``min``)."""

    metric: str = Field(min_length=1)
    n: int = Field(ge=1)
    mode: Literal["min", "max"]


class TierRetention(Strict):
    """Which checkpoints one tier keeps: a checkpoint is kept when any set rule keeps it.

    No rule set (an absent or empty block) keeps everything, so upgrading deletes nothing.
    """

    keep_last: int | None = Field(default=None, ge=1)
    keep_every_steps: int | None = Field(default=None, ge=1)
    keep_within: Annotated[Duration, Field(gt=0)] | None = None
    keep_best: KeepBestConfig | None = None

    @property
    def keeps_everything(self) -> bool:
        """Whether no rule is set (the tier deletes nothing by retention)."""
        return all(
            rule is None for rule in (self.keep_last, self.keep_every_steps, self.keep_within, self.keep_best)
        )


class ScrubConfig(Strict):
    """``scrub``: re-check each verified replica on the tier once per ``every``.

    Reading at most ``bandwidth`` bytes per second (``200MB``; ``MiB`` for binary units).
    """

    every: Annotated[Duration, Field(gt=0)]
    bandwidth: ByteSize = Field(gt=0, description="bytes per second")


#: A price in the operator's currency: a decimal (``0.023`` or ``"0.023"``), 0 to 1,000,000.
Price = Annotated[Decimal, Field(ge=0, le=1_000_000, allow_inf_nan=False)]


class TierBase(Strict):
    """What every kind of tier is configured with."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    # Small files are bound by fsyncs (POSIX) or round trips (S3), not bandwidth: sixteen in
    # flight share journal commits and hide latency. Big files stay within the buffer budget.
    concurrency: int = Field(default=16, ge=1, le=256)
    bandwidth_limit: ByteSize | None = Field(default=None, description="bytes per second")
    verify: Literal["native", "readback"] = "native"
    # Config makes tier 0 non-durable unless the file says otherwise (see Config._tier_defaults).
    durable: bool = True
    # Config makes tier 0 node-local unless the file says otherwise (see Config._tier_defaults):
    # a shared tier is one every daemon of the fleet sees (parallel FS, bucket), a node-local one
    # only its own node's daemon (NVMe).
    shared: bool = True
    retention: TierRetention = Field(default_factory=TierRetention)
    delete_delay: Duration = 3600.0
    verify_before_delete: Literal["checksum", "size"] = "checksum"
    #: Absent: the tier is not scrubbed.
    scrub: ScrubConfig | None = None
    #: What the tier costs (``GET /v1/usage``): per GiB held a month, per 1,000 writes and reads.
    #: Absent: not priced (its cost shows as unknown, never as 0).
    price_per_gb_month: Price | None = None
    price_per_1000_writes: Price | None = None
    price_per_1000_reads: Price | None = None

    @field_validator("retention", mode="before")
    @classmethod
    def _empty_retention(cls, value: Any) -> Any:
        return {} if value is None else value


class PosixTier(TierBase):
    """A POSIX directory: local NVMe or a parallel file system mount."""

    kind: Literal["posix"]
    path: Path
    free_space: FreeSpace | None = None


#: The longest object key S3 takes, in bytes of its UTF-8. AWS refuses longer keys; some
#: S3-compatible stores (moto) accept them, so tierd checks before it sends one.
S3_MAX_KEY_BYTES = 1024


#: S3's storage classes tierd writes with (``storage_class``); absent: the bucket's default.
S3StorageClass = Literal[
    "STANDARD", "STANDARD_IA", "INTELLIGENT_TIERING", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"
]
#: Classes whose objects S3 must restore (RestoreObject) before a GET can read them.
S3_ARCHIVE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})


class S3Tier(TierBase):
    """An S3-compatible bucket (AWS, MinIO, Ceph RGW, ...)."""

    kind: Literal["s3"]
    bucket: str = Field(min_length=3, max_length=63)
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    verify_tls: bool = True
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    profile: str | None = None
    part_size: ByteSize = Field(default=ByteSize(64 * 1024 * 1024), ge=5 * 1024 * 1024)
    # ``auto``: lean requests and the endpoint cache, plus HTTP/1.1 pipelining of small GETs
    # for a custom ``endpoint_url`` (not for AWS); ``off``: botocore alone.
    fast_path: Literal["auto", "off"] = "auto"
    storage_class: S3StorageClass | None = None
    server_side_encryption: Literal["AES256", "aws:kms"] | None = None
    sse_kms_key_id: str | None = Field(default=None, min_length=1, max_length=2048)
    #: The bucket has S3 Object Lock: legal holds are set on its objects (checked at start).
    object_lock: bool = False

    @model_validator(mode="after")
    def _placement(self) -> S3Tier:
        if self.sse_kms_key_id is not None and self.server_side_encryption != "aws:kms":
            raise ValueError("sse_kms_key_id: needs server_side_encryption: aws:kms")
        if self.storage_class in S3_ARCHIVE_CLASSES:
            what = f"storage_class {self.storage_class} (S3 must restore an object before it is read)"
            if self.verify == "readback":
                raise ValueError(f"verify: readback cannot read back objects of {what}; use native")
            if self.scrub is not None:
                raise ValueError(f"scrub: cannot read objects of {what}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_free_space(cls, data: Any) -> Any:
        if isinstance(data, dict) and "free_space" in data:
            raise ValueError("free_space: only POSIX tiers take free_space (a bucket does not fill up)")
        return data

    @field_validator("prefix")
    @classmethod
    def _prefix_shape(cls, prefix: str) -> str:
        if prefix.startswith("/"):
            raise ValueError("must not start with /")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        size = len(prefix.encode("utf-8", "surrogateescape"))
        if size >= S3_MAX_KEY_BYTES:
            raise ValueError(
                f"is {size:,} bytes in UTF-8: an S3 key (this prefix, then the path of a file under "
                f"tier 0) is at most {S3_MAX_KEY_BYTES:,}"
            )
        return prefix


# --- GCS (issue 28) ---------------------------------------------------------------------------

#: The longest object name GCS takes, in bytes of its UTF-8.
GCS_MAX_NAME_BYTES = 1024
#: A resumable upload's chunks (all but the last) are multiples of this (GCS's rule).
GCS_CHUNK_QUANTUM = 256 * 1024
GCS_KMS_KEY = r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$"


class GcsTier(TierBase):
    """A Google Cloud Storage bucket (or an emulator of the JSON API at ``endpoint_url``).

    Credentials, first found: ``credentials_file`` (a service account's JSON key or an
    ``authorized_user`` file), ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application default
    credentials, the metadata server of a GCE/GKE node. None at all for an emulator
    (``endpoint_url`` or ``STORAGE_EMULATOR_HOST``) without a ``credentials_file``.
    """

    kind: Literal["gcs"]
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
    prefix: str = ""
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://[^/?#]+/?$")
    verify_tls: bool = True
    credentials_file: Path | None = None
    #: Absent: the bucket's default class.
    storage_class: Literal["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"] | None = None
    kms_key_name: str | None = Field(default=None, pattern=GCS_KMS_KEY)
    #: Files bigger than this go up as resumable uploads in chunks of this size.
    chunk_size: ByteSize = Field(default=ByteSize(16 * 1024 * 1024), ge=GCS_CHUNK_QUANTUM, le=1024**3)

    @model_validator(mode="before")
    @classmethod
    def _no_free_space(cls, data: Any) -> Any:
        if isinstance(data, dict) and "free_space" in data:
            raise ValueError("free_space: only POSIX tiers take free_space (a bucket does not fill up)")
        return data

    @field_validator("chunk_size")
    @classmethod
    def _chunk_quantum(cls, size: ByteSize) -> ByteSize:
        if size % GCS_CHUNK_QUANTUM:
            raise ValueError(f"must be a multiple of 256 KiB ({GCS_CHUNK_QUANTUM:,} bytes): GCS's rule")
        return size

    @field_validator("prefix")
    @classmethod
    def _prefix_shape(cls, prefix: str) -> str:
        if prefix.startswith("/"):
            raise ValueError("must not start with /")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        size = len(prefix.encode("utf-8", "surrogateescape"))
        if size >= GCS_MAX_NAME_BYTES:
            raise ValueError(
                f"is {size:,} bytes in UTF-8: a GCS object name is at most {GCS_MAX_NAME_BYTES:,}"
            )
        return prefix


# --- end GCS ----------------------------------------------------------------------------------


TierConfig = Annotated[PosixTier | S3Tier | GcsTier, Field(discriminator="kind")]
