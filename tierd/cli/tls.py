"""How the CLI checks an HTTPS daemon's certificate.

``--ca-file`` (else ``$TIERD_CA_FILE``) names the CAs to trust, else the system's trust store,
with the host name checked (``tierd.client.tls_context``). A command that finds its daemon
through the config (no ``--url``) and no CA named trusts exactly the config's own
``api.tls.cert_file`` instead: the first certificate in it is pinned, so the CLI on a daemon's
node needs no CA file, and a certificate made out to the node's DNS name serves the CLI calling
127.0.0.1 too (its name is not checked: only the holder of that certificate's key can present it).
A client certificate comes from ``$TIERD_CLIENT_CERT`` (and ``$TIERD_CLIENT_KEY``) either way.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from tierd.config import Config
from tierd.errors import ConfigError

__all__ = ["verification"]

_BEGIN, _END = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"


def verification(ca_file: Path | None, config: Config | None) -> ssl.SSLContext:
    """The context the CLI checks the daemon with: ``ca_file``'s CAs, or ``config``'s own certificate.

    ``config`` is the daemon's config when the URL came from it (else None). Raises ConfigError
    naming the option, variable or key whose file cannot be used.
    """
    from tierd.client.wire import tls_context  # the job's client and httpx: a command that calls the API

    if ca_file is None and not os.environ.get("TIERD_CA_FILE") and config is not None and config.api.tls:
        return pinned(config.api.tls.cert_file)
    return tls_context(ca_file)


def pinned(cert_file: Path) -> ssl.SSLContext:
    """A context that trusts exactly the first certificate in ``cert_file``, whatever names it carries."""
    try:
        text = cert_file.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError([f"api.tls.cert_file: cannot read {cert_file}: {exc.strerror}"]) from None
    start, end = text.find(_BEGIN), text.find(_END)
    if start < 0 or end < start:
        raise ConfigError([f"api.tls.cert_file: {cert_file} holds no PEM certificate"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # the certificate itself is trusted, not a name signed by a CA
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a leaf may be the trust anchor
    try:
        context.load_verify_locations(cadata=text[start : end + len(_END)])
    except ssl.SSLError as exc:
        raise ConfigError(
            [f"api.tls.cert_file: {cert_file} is not a valid PEM certificate ({exc})"]
        ) from None
    from tierd.client.wire import load_client_cert

    load_client_cert(context)
    return context
