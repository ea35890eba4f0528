"""Reading the config: one YAML file, overridden by ``TIERD_*`` environment variables.

Environment variables name nested keys with ``__``: ``TIERD_CATALOG__URL`` overrides
``catalog.url``. Relative paths in the file are resolved against the file's directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tierd.config.model import Config
from tierd.errors import ConfigError

__all__ = ["DEFAULT_CONFIG_PATH", "default_config_path", "load_config"]

DEFAULT_CONFIG_PATH = Path("/etc/tierd/config.yaml")


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
    """Make relative tier, watch, restore root, TLS file and SQLite paths relative to the config file."""
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
    api = out.get("api")
    if isinstance(api, dict) and isinstance(api.get("tls"), dict):
        tls = api["tls"]
        files = {key: _resolve_file(tls[key], base) for key in _TLS_FILES if isinstance(tls.get(key), str)}
        out["api"] = {**api, "tls": {**tls, **files}}
    return out


_TLS_FILES = ("cert_file", "key_file", "client_ca_file")


def _resolve_file(name: str, base: Path) -> str:
    """A relative file name made absolute against ``base``."""
    return str(base / Path(name).expanduser())


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
