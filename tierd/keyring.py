"""The bearer tokens the API accepts: read once at start, and again when the daemon reloads.

A ``token_file`` is read here, never per request: a file renamed or removed while the daemon
runs changed every request's answer to a 500 when it was read on each one. The daemon reads
the files again on SIGHUP (``systemctl reload tierd``), so a token can be rotated without a
restart. A file that cannot be read (or is empty) is a ConfigError naming its key at start;
at a reload that token keeps its old value and a warning ``token_file_unreadable`` says why.
A reload whose config changes ``api.tokens`` replaces the whole set (``replace``), or nothing
when one of the new tokens cannot be read.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tierd.config import TokenConfig
from tierd.errors import ConfigError
from tierd.logs import get_logger

__all__ = ["Keyring", "Token"]

log = get_logger(__name__)


@dataclass(frozen=True)
class Token:
    """A token as the API compares it: its name, role and secret."""

    name: str
    role: Literal["read", "operate", "admin", "peer"]
    secret: bytes


class Keyring:
    """The configured tokens with their secrets in memory; ``find`` is what a request asks."""

    def __init__(self, configs: Sequence[TokenConfig]) -> None:
        """Read every token's secret now; raises ConfigError naming a file that cannot be read."""
        self._configs = tuple(configs)
        self._tokens = tuple(_load(index, config) for index, config in enumerate(self._configs))

    @property
    def enabled(self) -> bool:
        """Whether any token is configured (with none, authentication is off)."""
        return bool(self._tokens)

    def find(self, credential: str) -> Token | None:
        """The token whose secret is ``credential`` (compared in constant time), or None."""
        given = credential.encode()
        for token in self._tokens:
            if hmac.compare_digest(token.secret, given):
                return token
        return None

    def replace(self, configs: Sequence[TokenConfig]) -> None:
        """Take ``configs`` as the tokens, every secret read first.

        Raises ConfigError naming a file that cannot be read; the old tokens stay then.
        """
        fresh = tuple(_load(index, config) for index, config in enumerate(configs))
        self._configs, self._tokens = tuple(configs), fresh
        log.info("tokens_reloaded", tokens=len(fresh))

    def reload(self) -> None:
        """Read the token files again; a file that cannot be read keeps its token's old secret."""
        fresh = []
        for index, (config, old) in enumerate(zip(self._configs, self._tokens, strict=True)):
            try:
                fresh.append(_load(index, config))
            except ConfigError as exc:
                log.warning("token_file_unreadable", token=config.name, error=exc.problems[0])
                fresh.append(old)
        self._tokens = tuple(fresh)  # one assignment: a request sees the old set or the new
        log.info("tokens_reloaded", tokens=len(fresh))


def _load(index: int, config: TokenConfig) -> Token:
    key = f"api.tokens.{index}." + ("token" if config.token_file is None else "token_file")
    try:
        secret = config.secret()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{key}: cannot read {config.token_file}: {exc}"]) from None
    if not secret:
        raise ConfigError([f"{key}: is empty"])
    return Token(config.name, config.role, secret.encode())
