"""The whole configuration, :class:`Config`: every section, and the checks across them."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tierd.config.sections import (
    ApiConfig,
    CatalogConfig,
    FleetSettings,
    LogConfig,
    RestoreSettings,
    RetentionSettings,
    WatchConfig,
)
from tierd.config.stores import AnyTier, TierConfig
from tierd.config.tiers import PeerTier, PosixTier, TierBase

__all__ = ["Config"]


class Config(BaseSettings):
    """The whole tierd configuration."""

    model_config = SettingsConfigDict(
        env_prefix="TIERD_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    node: str = Field(default_factory=socket.gethostname)
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    drain_timeout_seconds: float = Field(default=30.0, ge=0)
    reconcile_interval_seconds: float = Field(default=300.0, gt=0)
    log: LogConfig = Field(default_factory=LogConfig)
    watch: list[WatchConfig] = Field(default_factory=list)
    tiers: list[TierConfig] = Field(min_length=1)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    restore: RestoreSettings = Field(default_factory=RestoreSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    #: The ``kind: peer`` entry of ``tiers``, taken out of the chain (``PeerTier`` says why).
    peer: PeerTier | None = None

    @model_validator(mode="before")
    @classmethod
    def _tier_defaults(cls, data: Any) -> Any:
        """Tier 0 is node-local and not durable unless it says so; every other tier is shared and durable.

        A ``kind: peer`` entry after tier 0 moves to ``peer``; at most one may be given.
        """
        tiers = data.get("tiers") if isinstance(data, dict) else None
        if not isinstance(tiers, list) or not tiers:
            return data
        data, tiers = _take_peer(data, tiers)
        first = tiers[0]
        defaults = {"durable": False, "shared": False}
        if isinstance(first, dict):
            first = {**defaults, **first}
        elif isinstance(first, TierBase):
            unset = {key: value for key, value in defaults.items() if key not in first.model_fields_set}
            first = first.model_copy(update=unset)
        return {**data, "tiers": [first, *tiers[1:]]}

    @model_validator(mode="after")
    def _coherent(self) -> Config:
        names = [t.name for t in self.tiers] + ([self.peer.name] if self.peer else [])
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"tiers: duplicate tier names {dupes}")
        first = self.tiers[0]
        if not isinstance(first, PosixTier):
            raise ValueError("tiers.0: the first tier must be kind: posix (it holds the watched paths)")
        for i, tier in enumerate(self.tiers):
            if i > 0 and not tier.shared and self.tiers[i - 1].shared:
                raise ValueError(
                    f"tiers.{i}.shared: a node-local tier cannot follow a shared one "
                    f"({self.tiers[i - 1].name}): copies only move from node-local tiers to shared ones"
                )
        if self.peer is not None and (
            _is_within(self.peer.path, first.path) or _is_within(first.path, self.peer.path)
        ):
            raise ValueError(
                f"tiers: the peer tier's path {self.peer.path} and tier 0's {first.path} must not "
                "hold one another (tier 0 is watched: other nodes' parts would look like checkpoints)"
            )
        for i, watch in enumerate(self.watch):
            if not _is_within(watch.path, first.path):
                raise ValueError(f"watch.{i}.path: {watch.path} is not inside tier 0 path {first.path}")
        _check_release(self)
        return self

    @property
    def tier0(self) -> PosixTier:
        """The first tier, where checkpoints are written."""
        tier = self.tiers[0]
        assert isinstance(tier, PosixTier)
        return tier

    def tier(self, name: str) -> AnyTier:
        """The tier named ``name``; raises KeyError for a name the config does not have."""
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise KeyError(name)

    @property
    def restore_roots(self) -> list[Path]:
        """The directories a restore may write into: ``restore.allowed_roots``, else tier 0's path."""
        return list(self.restore.allowed_roots or [self.tier0.path])

    def marker_for(self, relpath: str) -> str | None:
        """The marker file name configured for the watch holding ``relpath`` (relative to tier 0)."""
        target = self.tier0.path / relpath
        return next((w.marker for w in self.watch if w.marker and _is_within(target, w.path)), None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment wins over the file."""
        # The file's contents arrive as init kwargs; the environment wins over them.
        return (env_settings, init_settings)


def _check_release(config: Config) -> None:
    """Refuse ``retention.release_once_copied`` where it makes no sense, naming the key and why."""
    key = "retention.release_once_copied"
    if config.peer is not None and config.peer.retention.release_once_copied:
        raise ValueError(f"peer.{key}: only tier 0 releases its copies (the peer tier has its own keep_last)")
    for i, tier in enumerate(config.tiers[1:], start=1):
        if tier.retention.release_once_copied:
            raise ValueError(f"tiers.{i}.{key}: only tier 0 may release a step once it is copied onwards")
    first = config.tiers[0]
    if not first.retention.release_once_copied:
        return
    if first.shared:
        raise ValueError(
            f"tiers.0.{key}: tier 0 is shared: every node sees it, so no one node's copies can release it"
        )
    if len(config.tiers) < 2:
        raise ValueError(f"tiers.0.{key}: there is no tier 1 to copy a step to before it is released")


def _take_peer(data: dict[str, Any], tiers: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """``data`` with the ``kind: peer`` entries of ``tiers`` (but tier 0's) under ``peer``."""
    peers = [t for t in tiers[1:] if _kind(t) == "peer"]
    if not peers:
        return data, tiers
    if len(peers) > 1:
        raise ValueError("tiers: at most one tier may be kind: peer")
    chain = [tiers[0], *(t for t in tiers[1:] if _kind(t) != "peer")]
    return {**data, "tiers": chain, "peer": peers[0]}, chain


def _kind(tier: Any) -> Any:
    return tier.get("kind") if isinstance(tier, dict) else getattr(tier, "kind", None)


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
