"""What every tier is configured with (limits, retention, scrub, prices), and the POSIX tier.

The object stores' tiers are in ``stores``, on ``ObjectStoreTier``'s shared keys.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ByteSize, Field, field_validator, model_validator

from tierd.config.values import Duration, Space, Strict
from tierd.errors import ConfigError

__all__ = [
    "FreeSpace",
    "KeepBestConfig",
    "ObjectStoreTier",
    "PeerTier",
    "PosixTier",
    "Price",
    "ScrubConfig",
    "TierBase",
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
    ``release_once_copied`` (a node-local tier 0 only, such as a tmpfs) keeps a step there
    only until it is verified on tier 1 and, with a peer tier, safe against one node's loss:
    then the step goes even when it is its run's newest (``Config`` checks where it is set).
    """

    keep_last: int | None = Field(default=None, ge=1)
    keep_every_steps: int | None = Field(default=None, ge=1)
    keep_within: Annotated[Duration, Field(gt=0)] | None = None
    keep_best: KeepBestConfig | None = None
    release_once_copied: bool = False

    @property
    def keeps_everything(self) -> bool:
        """Whether no rule is set (the tier deletes nothing by retention)."""
        rules = (self.keep_last, self.keep_every_steps, self.keep_within, self.keep_best)
        return not self.release_once_copied and all(rule is None for rule in rules)


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
    # --- io_mode (issue 25): how big files are written ---
    #: ``direct`` (O_DIRECT), ``buffered`` (the page cache), or ``auto``: measured on the tier's
    #: file system at its first big write (``backends.posix.iomode``).
    io_mode: Literal["auto", "direct", "buffered"] = "auto"
    # --- end io_mode ---


class PeerTier(TierBase):
    """``kind: peer``: copies of this node's tier-0 parts on other nodes, and theirs here.

    It sits beside the chain of tiers, not in it (``Config.peer``): the chain's next hop goes
    on from tier 0 while the peer copies are made. ``path`` is this node's own peer directory
    (NVMe or RAM), where the other nodes' parts land; ``replicas`` how many other nodes get a
    copy of each of this node's parts. Never shared and never durable: it is a node's disk.
    ``token_file`` holds the ``peer`` token this node sends with (every node's ``api.tokens``
    lists it with role ``peer``; read at start like theirs), and its restores fetch copies back
    with; absent, this node only receives. ``ca_file`` checks https peers (absent: the
    system's CAs). Its retention keeps the newest step of each run (``keep_last: 1``) unless
    it says otherwise.
    """

    kind: Literal["peer"]
    path: Path
    replicas: int = Field(default=1, ge=1, le=16)
    free_space: FreeSpace | None = None
    durable: bool = False
    shared: bool = False
    token_file: Path | None = None
    ca_file: Path | None = None
    retention: TierRetention = Field(default_factory=lambda: TierRetention(keep_last=1))

    @model_validator(mode="after")
    def _node_local(self) -> PeerTier:
        if self.durable:
            raise ValueError("durable: a peer tier is another node's disk, never durable")
        if self.shared:
            raise ValueError("shared: a peer tier is node-local (each node has its own peer directory)")
        return self


class ObjectStoreTier(TierBase):
    """What the object stores' tiers share: a ``prefix``, under which a file's path is its name.

    A store's name has a longest length (``max_name``, counted by ``name_size`` in
    ``name_unit``); the prefix leaves room below it. No store takes ``free_space``.
    """

    prefix: str = ""
    max_name: ClassVar[int] = 1024
    name_unit: ClassVar[str] = "bytes in UTF-8"
    name_what: ClassVar[str] = "an object name"

    @classmethod
    def name_size(cls, name: str) -> int:
        """How long ``name`` is as the store counts it (bytes of its UTF-8 unless overridden)."""
        return len(name.encode("utf-8", "surrogateescape"))

    @model_validator(mode="before")
    @classmethod
    def _no_free_space(cls, data: Any) -> Any:
        if isinstance(data, dict) and "free_space" in data:
            raise ValueError(
                "free_space: only POSIX tiers take free_space (an object store does not fill up)"
            )
        return data

    @field_validator("prefix")
    @classmethod
    def _prefix_shape(cls, prefix: str) -> str:
        if prefix.startswith("/"):
            raise ValueError("must not start with /")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        size = cls.name_size(prefix)
        if size >= cls.max_name:
            raise ValueError(
                f"is {size:,} {cls.name_unit}: {cls.name_what} (this prefix, then the path of a file "
                f"under tier 0) is at most {cls.max_name:,}"
            )
        return prefix
