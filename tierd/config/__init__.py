"""The configuration: one YAML file, overridden by ``TIERD_*`` environment variables.

Environment variables name nested keys with ``__``: ``TIERD_CATALOG__URL`` overrides
``catalog.url``. Relative paths in the file are resolved against the file's directory.
Every name below is imported from here (``from tierd.config import Config, load_config``).

Modules:

- ``changes``: what a reload (SIGHUP) may change, and the config it applies (:func:`config_changes`).
- ``load``: reading the file and the environment into a :class:`Config` (:func:`load_config`).
- ``model``: :class:`Config`, the whole configuration, and the checks across its sections.
- ``sections``: the catalog, the API (its TLS and its tokens), watched directories, retention,
  restores, the fleet, logging.
- ``stores``: the object stores' tiers (S3, GCS, Azure Blob), and ``TierConfig``, any tier.
- ``tiers``: what every tier shares (limits, retention, scrub, prices), the POSIX tier, and
  what the object stores' tiers share.
- ``values``: a strict block, durations (``36h``) and amounts of free space (``15%``, ``200GB``).
"""

from tierd.config.load import DEFAULT_CONFIG_PATH, default_config_path, load_config
from tierd.config.model import Config
from tierd.config.sections import (
    ApiConfig,
    CatalogConfig,
    FleetSettings,
    Format,
    LogConfig,
    RestoreSettings,
    RetentionSettings,
    TlsConfig,
    TokenConfig,
    WatchConfig,
    is_loopback,
)
from tierd.config.stores import (
    S3_ARCHIVE_CLASSES,
    S3_MAX_KEY_BYTES,
    AnyTier,
    AzureTier,
    GcsTier,
    S3Tier,
    TierConfig,
)
from tierd.config.tiers import (
    FreeSpace,
    KeepBestConfig,
    ObjectStoreTier,
    PeerTier,
    PosixTier,
    ScrubConfig,
    TierBase,
    TierRetention,
)
from tierd.config.values import Duration, SpaceAmount, parse_duration, parse_space

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "S3_ARCHIVE_CLASSES",
    "S3_MAX_KEY_BYTES",
    "AnyTier",
    "ApiConfig",
    "AzureTier",
    "CatalogConfig",
    "Config",
    "Duration",
    "FleetSettings",
    "Format",
    "FreeSpace",
    "GcsTier",
    "KeepBestConfig",
    "LogConfig",
    "PeerTier",
    "ObjectStoreTier",
    "PosixTier",
    "RestoreSettings",
    "RetentionSettings",
    "S3Tier",
    "ScrubConfig",
    "SpaceAmount",
    "TierBase",
    "TierRetention",
    "TierConfig",
    "TlsConfig",
    "TokenConfig",
    "WatchConfig",
    "default_config_path",
    "is_loopback",
    "load_config",
    "parse_duration",
    "parse_space",
]
