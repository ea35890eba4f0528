"""HTTPS on the API: the server's TLS context from ``api.tls``, built and checked at start.

``server_context`` reads the certificate, the key and the client CAs once, before the daemon
starts anything, and raises ConfigError naming the key of a file that cannot be read or used:
a missing file, one that is not PEM, a key that does not match the certificate, or a key
protected by a passphrase (nobody is there to type it: OpenSSL would ask on the terminal).
TLS 1.2 is the oldest version offered. With ``client_ca_file`` a client must present a
certificate signed by one of those CAs, else the handshake fails before any HTTP is read.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from tierd.config import TlsConfig
from tierd.errors import ConfigError

__all__ = ["server_context"]


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """The TLS context the API serves with; raises ConfigError naming the ``api.tls`` key at fault."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _certificates("api.tls.cert_file", tls.cert_file)
    _readable("api.tls.key_file", tls.key_file)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_passphrase)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            reason = f"does not match the certificate in api.tls.cert_file ({tls.cert_file})"
        else:
            reason = "is not a PEM private key" + (f" ({exc.reason})" if exc.reason else "")
        raise ConfigError([f"api.tls.key_file: {tls.key_file} {reason}"]) from None
    if tls.client_ca_file is not None:
        _certificates("api.tls.client_ca_file", tls.client_ca_file)
        context.load_verify_locations(cafile=tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _readable(key: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError([f"{key}: cannot read {path}: {exc.strerror}"]) from None


def _certificates(key: str, path: Path) -> None:
    """Raise ConfigError naming ``key`` unless ``path`` holds PEM certificates OpenSSL parses."""
    text = _readable(key, path).decode("ascii", errors="replace")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError([f"{key}: {path} holds no PEM certificate"])
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
    except ssl.SSLError as exc:
        raise ConfigError([f"{key}: {path} is not a valid PEM certificate ({exc.reason})"]) from None


def _no_passphrase() -> str:
    raise ConfigError(["api.tls.key_file: the key is protected by a passphrase: give it unencrypted"])
