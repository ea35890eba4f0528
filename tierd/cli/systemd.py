"""``tierd systemd drop-in``: the site's paths for the hardened unit, from the config.

``deploy/systemd/tierd.service`` makes the whole file system read-only to tierd
(``ProtectSystem=strict``), hides /home, /root and /run/user (``ProtectHome=yes``) and gives it
a /tmp of its own (``PrivateTmp=yes``). The paths tierd must write differ per site: the drop-in
this prints makes every POSIX tier, every restore root and the SQLite catalog's directory
writable (``ReadWritePaths=``), the token files readable (``ReadOnlyPaths=``), and orders the
unit after the mounts holding them (``RequiresMountsFor=``). A path under a home directory is
bound into the unit's empty /home (``ProtectHome=tmpfs`` + ``BindPaths=``); one under /tmp or
/var/tmp turns the private /tmp off. An S3 tier without keys in the config may read the shared
credentials in /root/.aws. Install it as /etc/systemd/system/tierd.service.d/paths.conf and
run ``systemctl daemon-reload``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from tierd import __version__
from tierd.config import Config, PosixTier, S3Tier, default_config_path, load_config
from tierd.config.load import DEFAULT_CONFIG_PATH
from tierd.errors import ConfigError

__all__ = ["Need", "add_systemd", "drop_in", "needs"]

_HOMES = (PurePosixPath("/home"), PurePosixPath("/root"), PurePosixPath("/run/user"))
_TEMPS = (PurePosixPath("/tmp"), PurePosixPath("/var/tmp"))  # noqa: S108 (what PrivateTmp hides)
#: Where boto3 looks for shared credentials and profiles when the unit runs as root.
AWS_SHARED = PurePosixPath("/root/.aws")


@dataclass(frozen=True)
class Need:
    """A path the daemon reads or writes, and the key that names it."""

    path: PurePosixPath
    write: bool
    key: str
    #: A path that may be absent (``-`` in the unit: systemd skips it then).
    optional: bool = False


def add_systemd(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``systemd drop-in``."""
    group = sub.add_parser("systemd", help="systemd unit helpers").add_subparsers(metavar="COMMAND")
    parser = group.add_parser(
        "drop-in", help="print the unit's drop-in for this config's paths", parents=[common]
    )
    parser.set_defaults(func=_cmd_drop_in)


def _cmd_drop_in(args: argparse.Namespace) -> int:
    path = (args.config or default_config_path()).absolute()
    print(drop_in(load_config(path), path), end="")
    return 0


def needs(config: Config) -> list[Need]:
    """Every path the daemon needs beyond its state directory, each with its key.

    Raises ConfigError for a path systemd cannot take (not absolute, or a control character).
    """
    found: list[Need] = []
    for index, tier in enumerate(config.tiers):
        if isinstance(tier, PosixTier):
            found.append(Need(_absolute(tier.path, f"tiers.{index}.path"), True, f"tiers.{index}.path"))
    for index, root in enumerate(config.restore.allowed_roots or []):
        key = f"restore.allowed_roots.{index}"
        found.append(Need(_absolute(root, key), True, key))
    catalog = _sqlite_directory(config.catalog.url)
    if catalog is not None:
        found.append(Need(_absolute(catalog, "catalog.url"), True, "catalog.url"))
    for index, token in enumerate(config.api.tokens):
        if token.token_file is not None:
            key = f"api.tokens.{index}.token_file"
            found.append(Need(_absolute(token.token_file, key), False, key))
    shared = [i for i, t in enumerate(config.tiers) if isinstance(t, S3Tier) and t.access_key_id is None]
    if shared:
        key = f"tiers.{shared[0]}: an S3 tier without access_key_id may use boto3's shared credentials"
        found.append(Need(AWS_SHARED, False, key, optional=True))
    return found


def drop_in(config: Config, config_path: Path) -> str:
    """The drop-in's text for ``config`` read from ``config_path`` (see the module docstring)."""
    found = needs(config)
    lines = [
        f"# Made by `tierd systemd drop-in --config {config_path}` (tierd {__version__}) for",
        "# deploy/systemd/tierd.service: /etc/systemd/system/tierd.service.d/paths.conf, then",
        "# `systemctl daemon-reload`. Make it again when a path in the config changes.",
    ]
    mounts = [n.path for n in found if n.write]
    if mounts:
        lines += ["[Unit]", "RequiresMountsFor=" + " ".join(_quoted(p) for p in mounts), ""]
    lines += ["[Service]", *_service_lines(found, config_path)]
    return "\n".join(lines) + "\n"


def _service_lines(found: list[Need], config_path: Path) -> list[str]:
    lines = []
    if config_path != DEFAULT_CONFIG_PATH:
        lines.append(f"Environment={_quoted(PurePosixPath('TIERD_CONFIG=' + str(config_path)))}")
        found = [*found, Need(_absolute(config_path, "--config"), False, "--config")]
    if any(_under(n.path, _HOMES) for n in found):
        lines.append("ProtectHome=tmpfs")
    if any(_under(n.path, _TEMPS) for n in found):
        lines.append("PrivateTmp=no")
    for need in found:
        lines.append(f"# {need.key}")
        path = ("-" if need.optional else "") + _quoted(need.path)
        lines.append(f"{'ReadWritePaths' if need.write else 'ReadOnlyPaths'}={path}")
        if _under(need.path, _HOMES):
            lines.append(f"{'BindPaths' if need.write else 'BindReadOnlyPaths'}={path}")
    return lines


def _absolute(path: Path, key: str) -> PurePosixPath:
    if not path.is_absolute():
        raise ConfigError([f"{key}: {path} is not an absolute path (systemd needs one)"])
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in str(path)):
        raise ConfigError([f"{key}: {str(path)!r} holds a control character systemd cannot take"])
    return PurePosixPath(Path(path).resolve())


def _sqlite_directory(url: str) -> Path | None:
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url == prefix + ":memory:":
        return None
    return Path(url.removeprefix(prefix)).parent


def _under(path: PurePosixPath, roots: tuple[PurePosixPath, ...]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _quoted(path: PurePosixPath) -> str:
    """``path`` as one word of a unit file: ``%`` doubled, quoted where it has a space or quote."""
    text = str(path).replace("%", "%%")
    if any(c in text for c in " \t\"'\\"):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text
