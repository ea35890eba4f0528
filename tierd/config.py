"""The configuration: one YAML file, overridden by ``TIERD_*`` environment variables.

Environment variables name nested keys with ``__``: ``TIERD_CATALOG__URL`` overrides
``catalog.url``. Relative paths in the file are resolved against the file's directory.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ByteSize, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tierd.errors import ConfigError
from tierd.tierconfig import (
    S3_MAX_KEY_BYTES,
    Duration,
    FreeSpace,
    KeepBestConfig,
    PosixTier,
    S3Tier,
    ScrubConfig,
    SpaceAmount,
    TierBase,
    TierConfig,
    TierRetention,
    parse_duration,
    parse_space,
)
from tierd.tierconfig import Strict as _Strict

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "S3_MAX_KEY_BYTES",
    "ApiConfig",
    "CatalogConfig",
    "Config",
    "Duration",
    "FleetSettings",
    "FreeSpace",
    "KeepBestConfig",
    "PosixTier",
    "RestoreSettings",
    "RetentionSettings",
    "S3Tier",
    "ScrubConfig",
    "SpaceAmount",
    "TierRetention",
    "TierConfig",
    "TokenConfig",
    "WatchConfig",
    "default_config_path",
    "load_config",
    "parse_duration",
    "parse_space",
]

DEFAULT_CONFIG_PATH = Path("/etc/tierd/config.yaml")

FORMATS = (
    "auto",
    "dcp",
    "deepspeed",
    "megatron",
    "nemo",
    "orbax",
    "hf",
    "nvrx_local",
    "torch_save",
    "marker",
)
Format = Literal[
    "auto", "dcp", "deepspeed", "megatron", "nemo", "orbax", "hf", "nvrx_local", "torch_save", "marker"
]


class CatalogConfig(_Strict):
    """Where the catalog lives: ``sqlite:///path`` or ``postgresql+psycopg://...``."""

    url: str = "sqlite:///var/catalog.db"
    busy_timeout_ms: int = Field(default=30_000, ge=0)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        if not re.match(r"^(sqlite|postgresql(\+psycopg)?)://", url):
            raise ValueError("must start with sqlite:// or postgresql+psycopg://")
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        return url


class TokenConfig(_Strict):
    """A bearer token and the role it grants."""

    name: str = Field(min_length=1, max_length=128)
    token: SecretStr | None = None
    token_file: Path | None = None
    role: Literal["read", "operate", "admin"] = "read"

    @field_validator("name")
    @classmethod
    def _printable(cls, name: str) -> str:
        if not name.isprintable():
            raise ValueError("must be printable: it names the caller in the audit log and the CLI's tables")
        return name

    @model_validator(mode="after")
    def _one_source(self) -> TokenConfig:
        if (self.token is None) == (self.token_file is None):
            raise ValueError("set exactly one of token or token_file")
        return self

    def secret(self) -> str:
        """The token's value, read from ``token_file`` now when that is how it is given.

        The API never calls this per request: ``tierd.keyring`` reads it at start and on reload.
        """
        if self.token is not None:
            return self.token.get_secret_value()
        assert self.token_file is not None
        return self.token_file.read_text().strip()


class ApiConfig(_Strict):
    """The HTTP API: where it listens and who may call it."""

    listen: str = "127.0.0.1:8470"
    tokens: list[TokenConfig] = Field(default_factory=list)
    #: A request body longer than this is refused (413) before it is read. 8 MiB holds a notify
    #: naming 100,000 files (the most it may) at ~60 bytes a path; every other body is tiny.
    max_body_bytes: ByteSize = Field(default=ByteSize(8 * 1024 * 1024), ge=64 * 1024)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str) -> str:
        host, sep, port = listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:8470")
        return listen

    @property
    def host(self) -> str:
        """The address to bind, without IPv6 brackets."""
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        """The TCP port to bind (0 picks a free one)."""
        return int(self.listen.rpartition(":")[2])


class WatchConfig(_Strict):
    """A directory a training job writes checkpoints into.

    ``run`` names the run outright; ``run_pattern`` is a regular expression with a
    ``run`` group matched against each checkpoint's path relative to ``path``.
    """

    path: Path
    run: str | None = None
    run_pattern: str | None = None
    format: Format = "auto"
    marker: str | None = None
    settle_seconds: float = Field(default=30.0, gt=0)
    #: How many nodes write each step, each its part on its own node-local tier 0: a step is
    #: complete once that many parts are recorded (unless the format or notify says more).
    nodes: int = Field(default=1, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _run_source(self) -> WatchConfig:
        if (self.run is None) == (self.run_pattern is None):
            raise ValueError("set exactly one of run or run_pattern")
        if self.run_pattern is not None:
            try:
                compiled = re.compile(self.run_pattern)
            except re.error as exc:
                raise ValueError(f"run_pattern is not a valid regular expression: {exc}") from exc
            if "run" not in compiled.groupindex:
                raise ValueError("run_pattern needs a named group (?P<run>...)")
        if self.format == "marker" and not self.marker:
            raise ValueError("format: marker needs a marker file name")
        return self


class RetentionSettings(_Strict):
    """The retention service: how often it evaluates, and whether it only logs (``dry_run``)."""

    dry_run: bool = False
    interval: Annotated[Duration, Field(gt=0)] = 60.0


class RestoreSettings(_Strict):
    """Restores: where a restore may write, and who may give a restored tree to another owner.

    ``allowed_roots`` absent: tier 0's path only. ``owner`` in a request: ``owner_role`` or above.
    """

    allowed_roots: list[Path] | None = Field(default=None, min_length=1)
    #: A restore naming an ``owner`` may hand another user's private checkpoint to the caller:
    #: by default only an admin token may ask; ``operate`` lets every operate token ask too.
    owner_role: Literal["operate", "admin"] = "admin"

    @field_validator("allowed_roots")
    @classmethod
    def _absolute(cls, roots: list[Path] | None) -> list[Path] | None:
        for index, root in enumerate(roots or []):
            if not root.is_absolute():
                raise ValueError(f"entry {index}: {root} is not an absolute path")
            if ".." in root.parts:
                raise ValueError(f"entry {index}: {root} has a '..' component")
        return roots


class FleetSettings(_Strict):
    """The fleet on one PostgreSQL catalog: heartbeats, the shared tiers' leader lease, silence.

    A leader that dies is replaced within ``lease`` + ``heartbeat_interval`` (at most twice
    the lease); a node not heard from for ``node_timeout`` is shown ``silent``.
    """

    heartbeat_interval: Annotated[Duration, Field(gt=0)] = 5.0
    lease: Annotated[Duration, Field(gt=0)] = 15.0
    node_timeout: Annotated[Duration, Field(gt=0)] = 60.0

    @model_validator(mode="after")
    def _ordered(self) -> FleetSettings:
        if self.heartbeat_interval * 2 > self.lease:
            raise ValueError(
                f"lease: {self.lease:g}s must be at least twice heartbeat_interval "
                f"({self.heartbeat_interval:g}s), so a leader renews it in time"
            )
        if self.node_timeout < self.lease:
            raise ValueError(
                f"node_timeout: {self.node_timeout:g}s must be at least the lease ({self.lease:g}s)"
            )
        return self


class LogConfig(_Strict):
    """Logging: level and rendering (``auto`` is JSON unless stderr is a terminal)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


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

    @model_validator(mode="before")
    @classmethod
    def _tier_defaults(cls, data: Any) -> Any:
        """Tier 0 is node-local and not durable unless it says so; every other tier is shared and durable."""
        tiers = data.get("tiers") if isinstance(data, dict) else None
        if not isinstance(tiers, list) or not tiers:
            return data
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
        names = [t.name for t in self.tiers]
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
        for i, watch in enumerate(self.watch):
            if not _is_within(watch.path, first.path):
                raise ValueError(f"watch.{i}.path: {watch.path} is not inside tier 0 path {first.path}")
        return self

    @property
    def tier0(self) -> PosixTier:
        """The first tier, where checkpoints are written."""
        tier = self.tiers[0]
        assert isinstance(tier, PosixTier)
        return tier

    def tier(self, name: str) -> PosixTier | S3Tier:
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


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def default_config_path() -> Path:
    """``$TIERD_CONFIG`` when set, else ``/etc/tierd/config.yaml``."""
    return Path(os.environ.get("TIERD_CONFIG", DEFAULT_CONFIG_PATH))


def load_config(path: Path) -> Config:
    """Read, override from the environment, resolve paths and validate ``path``.

    Raises ConfigError naming each bad key and the reason.
    """
    raw = _read_yaml(path)
    raw = _resolve_paths(raw, path.resolve().parent)
    try:
        config = Config(**raw)
    except ValidationError as exc:
        raise ConfigError([_describe(err) for err in exc.errors()]) from None
    return _resolve_env_paths(config, path.resolve().parent)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping of keys"])
    return data


def _resolve_paths(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    """Make relative tier, watch, restore root and SQLite paths relative to the config file."""
    out = dict(raw)
    for key in ("tiers", "watch"):
        items = out.get(key)
        if isinstance(items, list):
            out[key] = [_resolve_item_path(item, base) for item in items]
    restore = out.get("restore")
    if isinstance(restore, dict) and isinstance(restore.get("allowed_roots"), list):
        out["restore"] = {
            **restore,
            "allowed_roots": [_resolve_root(r, base) for r in restore["allowed_roots"]],
        }
    catalog = out.get("catalog")
    if isinstance(catalog, dict) and isinstance(catalog.get("url"), str):
        out["catalog"] = {**catalog, "url": _resolve_sqlite_url(catalog["url"], base)}
    return out


def _resolve_root(root: Any, base: Path) -> Any:
    """A relative restore root made absolute against ``base`` (its ``..`` folded in)."""
    if not isinstance(root, str) or Path(root).expanduser().is_absolute():
        return root
    return os.path.normpath(base / Path(root).expanduser())


def _resolve_item_path(item: Any, base: Path) -> Any:
    if isinstance(item, dict) and isinstance(item.get("path"), str):
        return {**item, "path": str(base / Path(item["path"]).expanduser())}
    return item


def _resolve_sqlite_url(url: str, base: Path) -> str:
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url.startswith(prefix + "/") or url == prefix + ":memory:":
        return url
    return prefix + str(base / url.removeprefix(prefix))


def _resolve_env_paths(config: Config, base: Path) -> Config:
    """An SQLite URL given in the environment is resolved like one in the file."""
    url = _resolve_sqlite_url(config.catalog.url, base)
    if url == config.catalog.url:
        return config
    return config.model_copy(update={"catalog": config.catalog.model_copy(update={"url": url})})


def _describe(err: Any) -> str:
    key = ".".join(str(part) for part in err["loc"]) or "(top level)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "missing":
        msg = "required key is missing"
    return f"{key}: {msg}"
