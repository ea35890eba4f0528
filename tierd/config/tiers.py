"""The tiers' configuration: each tier's kind, limits, retention, free-space marks and scrub."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ByteSize, Field, SecretStr, field_validator, model_validator

from tierd.config.values import Duration, Space, Strict
from tierd.errors import ConfigError

__all__ = [
    "FreeSpace",
    "KeepBestConfig",
    "AZURE_MAX_NAME_CHARS",
    "AzureTier",
    "S3_MAX_KEY_BYTES",
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


# --- azure (issue 28) ---
#: The longest blob name Azure takes, in characters (the prefix plus the file's path).
AZURE_MAX_NAME_CHARS = 1024
#: Azure's access tiers, as its API spells them.
AzureAccessTier = Literal["Hot", "Cool", "Cold", "Archive"]


class AzureTier(TierBase):
    """An Azure Blob Storage container (block blobs), or an emulator such as Azurite.

    Credentials, first that is set: ``account_key``, ``sas_token``, else the Azure identity
    chain (``azure-identity``'s DefaultAzureCredential: managed identity, workload identity,
    environment, Azure CLI). ``endpoint_url`` replaces ``https://<account>.blob.core.windows.net``
    (Azurite, sovereign clouds). ``storage_class`` (the access tier) and ``encryption_scope`` go
    with every write; absent, the account's defaults apply.
    """

    kind: Literal["azure"]
    account: str = Field(pattern=r"^[a-z0-9]{3,24}$")
    container: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
    prefix: str = ""
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    account_key: SecretStr | None = None
    sas_token: SecretStr | None = None
    storage_class: AzureAccessTier | None = None
    encryption_scope: str | None = Field(default=None, pattern=r"^[A-Za-z0-9]{3,63}$")
    block_size: ByteSize = Field(default=ByteSize(16 * 1024 * 1024), ge=1024 * 1024, le=4000 * 1024 * 1024)

    @model_validator(mode="before")
    @classmethod
    def _no_free_space(cls, data: Any) -> Any:
        if isinstance(data, dict) and "free_space" in data:
            raise ValueError("free_space: only POSIX tiers take free_space (a container does not fill up)")
        return data

    @model_validator(mode="after")
    def _one_credential(self) -> AzureTier:
        if self.account_key is not None and self.sas_token is not None:
            raise ValueError("account_key, sas_token: give one credential, not both")
        return self

    @field_validator("prefix")
    @classmethod
    def _prefix_shape(cls, prefix: str) -> str:
        if prefix.startswith("/"):
            raise ValueError("must not start with /")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if len(prefix) >= AZURE_MAX_NAME_CHARS:
            raise ValueError(
                f"is {len(prefix):,} characters: a blob name (this prefix, then the path of a file "
                f"under tier 0) is at most {AZURE_MAX_NAME_CHARS:,}"
            )
        return prefix

    @field_validator("container")
    @classmethod
    def _container_shape(cls, container: str) -> str:
        if "--" in container:
            raise ValueError("must not hold two dashes in a row (Azure refuses such container names)")
        return container

    @field_validator("sas_token")
    @classmethod
    def _sas_shape(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and "sig=" not in token.get_secret_value():
            raise ValueError("is not a SAS token (no sig= field)")
        return token


# --- end azure ---


TierConfig = Annotated[PosixTier | S3Tier | AzureTier, Field(discriminator="kind")]
