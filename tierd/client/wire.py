"""What both clients do alike on the wire.

The connection's settings (``$TIERD_URL``, ``$TIERD_TOKEN``, and for HTTPS ``$TIERD_CA_FILE``,
``$TIERD_CLIENT_CERT``, ``$TIERD_CLIENT_KEY``), the wait a busy daemon asks for, an answer
turned into its JSON or an :class:`~tierd.errors.ApiError`, and a failed connection turned
into :class:`~tierd.errors.Unreachable` or :class:`~tierd.errors.Untrusted`.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import httpx

from tierd.client.ops import Call
from tierd.errors import ApiError, ConfigError, TierdError, Unreachable, Untrusted

__all__ = [
    "BUSY_RETRIES",
    "DEFAULT_URL",
    "PathName",
    "answer",
    "busy_wait",
    "connection_error",
    "load_client_cert",
    "settings",
    "tls_context",
]

DEFAULT_URL = "http://127.0.0.1:8470"
PathName = str | os.PathLike[str]


def settings(
    url: str | None,
    token: str | None,
    timeout: float,
    *,
    ca_file: PathName | None = None,
    verify: ssl.SSLContext | bool | None = None,
) -> dict[str, Any]:
    """The arguments of an httpx client: ``url`` or ``$TIERD_URL``, ``token`` or ``$TIERD_TOKEN``.

    An HTTPS daemon's certificate is checked as :func:`tls_context` says, or as ``verify`` says
    when given (a context of the caller's own; False: not at all).
    """
    token = token if token is not None else os.environ.get("TIERD_TOKEN")
    if verify is not None and ca_file is not None:
        raise ValueError("give ca_file or verify, not both")
    return {
        "base_url": url or os.environ.get("TIERD_URL") or DEFAULT_URL,
        "headers": {"Authorization": f"Bearer {token}"} if token else {},
        "timeout": timeout,
        "verify": tls_context(ca_file) if verify is None else verify,
    }


def tls_context(ca_file: PathName | None = None, *, client_cert: PathName | None = None) -> ssl.SSLContext:
    """How a client checks an HTTPS daemon, and the certificate it presents if any.

    The daemon's certificate must be signed by a CA in ``ca_file`` (else ``$TIERD_CA_FILE``,
    else the system's trust store) and name the host called. ``client_cert`` (else
    ``$TIERD_CLIENT_CERT``) is a PEM file with a certificate and its key (or the key in
    ``$TIERD_CLIENT_KEY``), for a daemon with ``api.tls.client_ca_file``. Raises ConfigError
    naming the argument or variable whose file cannot be used.
    """
    ca_key, ca = _given("ca_file", ca_file, "TIERD_CA_FILE")
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise _unusable(ca_key, ca, exc) from None
    load_client_cert(context, client_cert)
    return context


def load_client_cert(context: ssl.SSLContext, client_cert: PathName | None = None) -> None:
    """Have ``context`` present ``client_cert`` (else ``$TIERD_CLIENT_CERT``'s), when there is one.

    Its key is in the same PEM file, or in ``$TIERD_CLIENT_KEY``. Raises ConfigError.
    """
    cert_key, cert = _given("client_cert", client_cert, "TIERD_CLIENT_CERT")
    if cert is None:
        return
    try:
        context.load_cert_chain(cert, os.environ.get("TIERD_CLIENT_KEY") or None)
    except (OSError, ssl.SSLError) as exc:
        raise _unusable(cert_key, cert, exc) from None


def _given(name: str, value: PathName | None, variable: str) -> tuple[str, PathName | None]:
    """``value`` named ``name``, else the environment's ``variable`` named so (None when unset)."""
    if value is not None:
        return name, value
    return f"${variable}", os.environ.get(variable) or None


def _unusable(key: str, path: PathName | None, exc: OSError) -> ConfigError:
    return ConfigError([f"{key}: cannot use {path}: {exc.strerror or exc}"])


def connection_error(base_url: httpx.URL, exc: httpx.TransportError) -> TierdError:
    """What a client raises when a call to ``base_url`` failed to connect, send or read.

    Untrusted when the daemon's certificate failed verification; otherwise Unreachable, with
    a hint when the daemon closed the connection at once (HTTPS spoken to plainly, or a client
    certificate the daemon requires).
    """
    if _certificate_failed(exc):
        return Untrusted(
            f"tierd at {base_url} presented a certificate this client does not trust ({exc}): give "
            "the CA that signed it (ca_file, $TIERD_CA_FILE, the CLI's --ca-file)"
        )
    hint = ""
    if isinstance(exc, httpx.RemoteProtocolError):
        hint = (
            " (does it serve HTTPS? then use an https:// URL)"
            if base_url.scheme == "http"
            else " (does it require a client certificate? give one in $TIERD_CLIENT_CERT)"
        )
    return Unreachable(f"cannot reach tierd at {base_url}: {exc}{hint}")


def _certificate_failed(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: How often a call the daemon turned away as busy (503 with Retry-After) is sent again.
BUSY_RETRIES = 5
_BUSY_WAIT_CAP = 10.0


def busy_wait(response: httpx.Response, attempt: int) -> float | None:
    """Seconds to wait before sending again a call answered 503 with Retry-After; None: do not.

    The daemon answers so before doing any of the call's work (too many requests at once, or
    the catalog away), so sending it again is safe.
    """
    if response.status_code != 503 or attempt >= BUSY_RETRIES:
        return None
    try:
        return min(max(float(response.headers["Retry-After"]), 0.05), _BUSY_WAIT_CAP)
    except (KeyError, ValueError):
        return None


def answer(call: Call, response: httpx.Response) -> Any:
    """The decoded body; None for a 404 the call expects; raises ApiError for any other 4xx/5xx."""
    if call.missing_ok and response.status_code == 404:
        return None
    if response.status_code >= 400:
        problem: dict[str, Any] | None = None
        try:
            body = response.json()
            problem = body if isinstance(body, dict) else None
        except ValueError:
            pass
        detail = str((problem or {}).get("detail") or response.text or response.reason_phrase)
        raise ApiError(response.status_code, detail, problem)
    return response.json() if response.content else None
