"""The config's sections beside its tiers.

The catalog, the API (its TLS and its tokens), watched directories, retention, restores, the
fleet and logging.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ByteSize, Field, SecretStr, ValidationInfo, field_validator, model_validator

from tierd.config.values import Duration, Strict

__all__ = [
    "FORMATS",
    "ApiConfig",
    "CatalogConfig",
    "FleetSettings",
    "Format",
    "LogConfig",
    "RestoreSettings",
    "RetentionSettings",
    "TlsConfig",
    "TokenConfig",
    "WatchConfig",
    "is_loopback",
]

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


class CatalogConfig(Strict):
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


class TokenConfig(Strict):
    """A bearer token and the role it grants."""

    name: str = Field(min_length=1, max_length=128)
    token: SecretStr | None = None
    token_file: Path | None = None
    #: ``peer`` is apart from the others: it may only send, fetch and drop peer copies
    #: (``/v1/peer/...``), and nothing else grants that.
    role: Literal["read", "operate", "admin", "peer"] = "read"

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
        """The inline ``token``'s value; a ``token_file`` is read by ``tierd.keyring``, with checks.

        Raises ValueError for a token given as a file.
        """
        if self.token is None:
            raise ValueError(f"token {self.name!r} is in a file: tierd.keyring reads it")
        return self.token.get_secret_value()


class TlsConfig(Strict):
    """HTTPS on the API: the server's certificate and key, and optionally client certificates.

    With ``client_ca_file`` every client must present a certificate signed by one of its CAs
    (mutual TLS); bearer tokens are still checked after the handshake. The files are read when
    the daemon starts (``tierd.api.tls``): one that cannot be read, or a key that does not
    match the certificate, stops it with exit 78 naming the key.
    """

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name, without brackets) is only reachable from this node.

    127.0.0.0/8, ::1 (also IPv4-mapped) and ``localhost``; any other name counts as reachable
    from elsewhere (tierd does not resolve it to decide).
    """
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


class ApiConfig(Strict):
    """The HTTP API: where it listens, over TLS or not, and who may call it.

    With no tokens every caller is admin: that is refused unless ``listen`` is a loopback
    address or ``allow_anonymous`` says so outright.
    """

    listen: str = "127.0.0.1:8470"
    #: Serve without tokens on an address other nodes can reach (every caller is then admin).
    allow_anonymous: bool = False
    tls: TlsConfig | None = None
    # validate_default: the check below runs when tokens are left out too.
    tokens: list[TokenConfig] = Field(default_factory=list, validate_default=True)
    #: A request body longer than this is refused (413) before it is read. 8 MiB holds a notify
    #: naming 100,000 files (the most it may) at ~60 bytes a path; every other body is tiny.
    max_body_bytes: ByteSize = Field(default=ByteSize(8 * 1024 * 1024), ge=64 * 1024)
    #: One ``http_request`` log line per request (method, route template, status, duration,
    #: the caller's token name). Off by default: a busy job's polling would fill the journal.
    access_log: bool = False

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str) -> str:
        host, sep, port = listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:8470")
        return listen

    @field_validator("tokens")
    @classmethod
    def _no_anonymous_admin_by_accident(
        cls, tokens: list[TokenConfig], info: ValidationInfo
    ) -> list[TokenConfig]:
        listen = info.data.get("listen")
        if tokens or listen is None or info.data.get("allow_anonymous"):
            return tokens
        host = listen.rpartition(":")[0].strip("[]")
        if not is_loopback(host):
            raise ValueError(
                f"empty, and api.listen ({listen}) is not a loopback address: every caller who can "
                "reach it would be admin (deletes included). Configure tokens, listen on 127.0.0.1, "
                "or set api.allow_anonymous: true to mean it"
            )
        return tokens

    @property
    def host(self) -> str:
        """The address to bind, without IPv6 brackets."""
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        """The TCP port to bind (0 picks a free one)."""
        return int(self.listen.rpartition(":")[2])


class WatchConfig(Strict):
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


class RetentionSettings(Strict):
    """The retention service: how often it evaluates, and whether it only logs (``dry_run``)."""

    dry_run: bool = False
    interval: Annotated[Duration, Field(gt=0)] = 60.0


class RestoreSettings(Strict):
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


class FleetSettings(Strict):
    """The fleet on one PostgreSQL catalog: heartbeats, the shared tiers' leader lease, silence.

    A leader that dies is replaced within ``lease`` + ``heartbeat_interval`` (at most twice
    the lease); a node not heard from for ``node_timeout`` is shown ``silent``.
    """

    heartbeat_interval: Annotated[Duration, Field(gt=0)] = 5.0
    lease: Annotated[Duration, Field(gt=0)] = 15.0
    node_timeout: Annotated[Duration, Field(gt=0)] = 60.0
    #: The URL other daemons reach this one's API at (``https://node7.rack2:8470``), shown in
    #: the fleet's table; a peer tier sends its copies there. Absent: not reachable by peers.
    advertise_url: str | None = Field(default=None, max_length=255)
    #: What fails together with this node (a rack, a power feed): peers are chosen in other
    #: failure domains first. Absent: a domain of its own.
    failure_domain: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

    @field_validator("advertise_url")
    @classmethod
    def _url_shape(cls, url: str | None) -> str | None:
        if url is None:
            return None
        if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}", url):
            raise ValueError(f"{url!r} must be http(s)://HOST:PORT, with no path (e.g. https://node7:8470)")
        return url

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


class LogConfig(Strict):
    """Logging: level and rendering (``auto`` is JSON unless stderr is a terminal)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
