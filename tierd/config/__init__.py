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
- ``tiers``: each tier's kind, limits, retention, free-space marks and scrub.
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
from tierd.config.tiers import (
    S3_MAX_KEY_BYTES,
    FreeSpace,
    KeepBestConfig,
    PeerTier,
    PosixTier,
    S3Tier,
    ScrubConfig,
    TierBase,
    TierConfig,
    TierRetention,
)
from tierd.config.values import Duration, SpaceAmount, parse_duration, parse_space

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "S3_MAX_KEY_BYTES",
    "ApiConfig",
    "CatalogConfig",
    "Config",
    "Duration",
    "FleetSettings",
    "Format",
    "FreeSpace",
    "KeepBestConfig",
    "LogConfig",
    "PeerTier",
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
