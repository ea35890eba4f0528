"""The bearer tokens the API accepts: read once at start, and again when the daemon reloads.

A ``token_file`` is read here, never per request: a file renamed or removed while the daemon
runs changed every request's answer to a 500 when it was read on each one. The daemon reads
the files again on SIGHUP (``systemctl reload tierd``), so a token can be rotated without a
restart. A file that cannot be read (or is empty) is a ConfigError naming its key at start;
at a reload that token keeps its old value and a warning ``token_file_unreadable`` says why.
A token file any user may read, one larger than 64 KiB, or one holding a space, a line break
or a control character inside the token is refused the same way (``read_token_file``, which
the CLI's ``--token-file`` uses too): a token every local user can read is no secret.
A reload whose config changes ``api.tokens`` replaces the whole set (``replace``), or nothing
when one of the new tokens cannot be read. The peer tier's ``token_file`` (the token this
node presents to its peers) is read the same way (``peer_token``).
"""

from __future__ import annotations

import hmac
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tierd.config import PeerTier, TokenConfig
from tierd.errors import ConfigError
from tierd.logs import get_logger

__all__ = ["MAX_TOKEN_FILE_BYTES", "Keyring", "Token", "peer_token", "read_token_file"]

log = get_logger(__name__)

#: A token file larger than this is not a token (a wrong path, a key bundle): refused unread.
MAX_TOKEN_FILE_BYTES = 64 * 1024


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


def read_token_file(path: Path) -> str:
    """The token held in file ``path``; ValueError says why it holds none (never quoting it)."""
    try:
        with path.open("rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if mode & stat.S_IROTH:
                raise ValueError(f"every user may read it (mode {stat.S_IMODE(mode):o}); chmod o-r {path}")
            data = file.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ValueError(f"larger than {MAX_TOKEN_FILE_BYTES} bytes, not a token")
    secret = data.strip()
    if not secret:
        raise ValueError("is empty")
    if not all(0x21 <= byte <= 0x7E for byte in secret):
        raise ValueError("holds a space, a line break, a control or a non-ASCII character inside the token")
    return secret.decode("ascii")


def peer_token(tier: PeerTier | None) -> str | None:
    """The ``peer``-role token in the peer tier's ``token_file`` (None: no peer tier, or no file).

    Raises ConfigError naming the key when the file cannot be read, holds no token, or every
    user may read it.
    """
    if tier is None or tier.token_file is None:
        return None
    try:
        return read_token_file(tier.token_file)
    except ValueError as exc:
        raise ConfigError([f"tiers.{tier.name}.token_file: {exc} ({tier.token_file})"]) from None


def _load(index: int, config: TokenConfig) -> Token:
    if config.token_file is not None:
        key = f"api.tokens.{index}.token_file"
        try:
            secret = read_token_file(config.token_file)
        except ValueError as exc:
            raise ConfigError([f"{key}: {exc} ({config.token_file})"]) from None
    else:
        secret = config.secret()
        if not secret:
            raise ConfigError([f"api.tokens.{index}.token: is empty"])
    return Token(config.name, config.role, secret.encode())
