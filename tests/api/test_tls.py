"""``api.tls``'s files are read and checked when the daemon starts: each fault names its key."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme

from tierd.api.tls import server_context
from tierd.config import TlsConfig
from tierd.errors import ConfigError


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a certificate and its key, another key, the key under a passphrase, and junk."""
    root = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
    cert.private_key_pem.write_to_path(str(root / "key.pem"))
    ca.issue_cert("elsewhere").private_key_pem.write_to_path(str(root / "other.key"))
    locked = ["openssl", "pkey", "-in", str(root / "key.pem"), "-aes256", "-passout", "pass:x"]
    subprocess.run([*locked, "-out", str(root / "locked.key")], check=True)
    (root / "junk").write_text("not PEM\n")
    (root / "bad.pem").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    return root


def test_a_certificate_and_its_key_serve_tls_1_2_and_up(files: Path) -> None:
    context = server_context(TlsConfig(cert_file=files / "cert.pem", key_file=files / "key.pem"))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE


def test_client_ca_file_requires_client_certificates(files: Path) -> None:
    tls = TlsConfig(cert_file=files / "cert.pem", key_file=files / "key.pem", client_ca_file=files / "ca.pem")
    assert server_context(tls).verify_mode == ssl.CERT_REQUIRED


Tls = Callable[[Path], TlsConfig]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda f: TlsConfig(cert_file=f / "none.pem", key_file=f / "key.pem"),
            "api.tls.cert_file: cannot read",
        ),
        (
            lambda f: TlsConfig(cert_file=f / "junk", key_file=f / "key.pem"),
            "api.tls.cert_file: {f}/junk holds no",
        ),
        (
            lambda f: TlsConfig(cert_file=f / "bad.pem", key_file=f / "key.pem"),
            "api.tls.cert_file: {f}/bad.pem is",
        ),
        (lambda f: TlsConfig(cert_file=f / "cert.pem", key_file=f / "none"), "api.tls.key_file: cannot read"),
        (
            lambda f: TlsConfig(cert_file=f / "cert.pem", key_file=f / "other.key"),
            "api.tls.key_file: {f}/other.key does not match the certificate in api.tls.cert_file",
        ),
        (
            lambda f: TlsConfig(cert_file=f / "cert.pem", key_file=f / "junk"),
            "api.tls.key_file: {f}/junk is not",
        ),
        (
            lambda f: TlsConfig(cert_file=f / "cert.pem", key_file=f / "locked.key"),
            "api.tls.key_file: the key is protected by a passphrase",
        ),
        (
            lambda f: TlsConfig(cert_file=f / "cert.pem", key_file=f / "key.pem", client_ca_file=f / "junk"),
            "api.tls.client_ca_file: {f}/junk holds no PEM certificate",
        ),
    ],
)
def test_each_fault_names_its_key(files: Path, make: Tls, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        server_context(make(files))
    assert message.format(f=files) in str(refused.value)
