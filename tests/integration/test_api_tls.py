"""The API over HTTPS, as an operator sets it up: ``api.tls`` in the config, the real daemon.

A throwaway CA (trustme) signs the daemon's certificate (and a client's). The job's client and
the CLI reach the daemon over https; a client trusting another CA is refused with a clear
error; plain http to the TLS port fails at once and leaves the daemon serving; with
``client_ca_file`` a client without a certificate is refused. A key that does not match the
certificate, and a listen address other nodes can reach with no tokens, stop the daemon with
exit 78 naming the key. ``/v1/docs`` loads nothing from another host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
import trustme

from tests.conftest import posix_config_dict
from tests.fixtures.daemon import Daemon, run_cli
from tests.fixtures.net import free_port
from tierd.client import Client, tls_context
from tierd.errors import Unreachable, Untrusted

TOKEN = "o-token"
TOKENS = [{"name": "ops", "token": TOKEN, "role": "operate"}]

# Its tests share one daemon (the module fixture): on one xdist worker, started once.
pytestmark = pytest.mark.xdist_group("api_tls")


@dataclass(frozen=True)
class Pki:
    """The test CA's certificate, the daemon's certificate and key, and a client's, as files."""

    ca: Path
    cert: Path
    key: Path
    client: Path  # a client certificate and its key, in one PEM file
    other_ca: Path  # a CA that signed nothing here


def make_pki(root: Path) -> Pki:
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("ops@example")
    files = Pki(root / "ca.pem", root / "cert.pem", root / "key.pem", root / "client.pem", root / "other.pem")
    ca.cert_pem.write_to_path(str(files.ca))
    server.private_key_pem.write_to_path(str(files.key))
    for blob in server.cert_chain_pems:
        blob.write_to_path(str(files.cert), append=True)
    client.private_key_and_cert_chain_pem.write_to_path(str(files.client))
    other.cert_pem.write_to_path(str(files.other_ca))
    return files


def tls_config(root: Path, pki: Pki, **tls: Any) -> dict[str, Any]:
    api = {
        "listen": f"127.0.0.1:{free_port()}",
        "tokens": TOKENS,
        "tls": {"cert_file": str(pki.cert), "key_file": str(pki.key), **tls},
    }
    return posix_config_dict(root, api=api)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("tls-daemon")
    served = Daemon.prepare(root, tls_config(root, pki), verify=tls_context(pki.ca))
    served.start()
    try:
        served.wait_ready()
        yield served
    finally:
        served.stop()


def cli(root: Path, *argv: str) -> tuple[int, str]:
    return run_cli(list(argv), root / "cli.log")


def test_the_job_client_and_the_cli_talk_https(daemon: Daemon, pki: Pki, tmp_path: Path) -> None:
    assert daemon.url.startswith("https://")
    with Client(daemon.url, TOKEN, ca_file=pki.ca) as client:
        assert client.latest("demo") is None
    config = str(daemon.config_path)
    # On the daemon's node with no CA named: the CLI trusts the config's own certificate.
    code, out = cli(tmp_path, "ls", "--config", config, "--token", TOKEN, "--json")
    assert code == 0, out
    assert '"total": 0' in out
    code, out = cli(tmp_path, "ls", "--url", daemon.url, "--ca-file", str(pki.ca), "--token", TOKEN)
    assert code == 0, out


def test_ca_file_from_the_environment(daemon: Daemon, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERD_CA_FILE", str(pki.ca))
    with Client(daemon.url, TOKEN) as client:
        assert client.latest("demo") is None


def test_a_certificate_signed_by_another_ca_is_refused_clearly(
    daemon: Daemon, pki: Pki, tmp_path: Path
) -> None:
    for client in (Client(daemon.url, TOKEN, ca_file=pki.other_ca), Client(daemon.url, TOKEN)):
        with client, pytest.raises(Untrusted) as refused:
            client.latest("demo")
        assert "does not trust" in str(refused.value)
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
        assert not refused.value.retryable
    code, out = cli(tmp_path, "ls", "--url", daemon.url, "--ca-file", str(pki.other_ca), "--token", TOKEN)
    assert code == 1
    assert "presented a certificate this client does not trust" in out
    assert "--ca-file" in out
    assert "Traceback" not in out


def test_plain_http_to_the_tls_port_fails_at_once_and_the_daemon_serves_on(
    daemon: Daemon, pki: Pki, tmp_path: Path
) -> None:
    plain = daemon.url.replace("https://", "http://")
    with Client(plain, TOKEN) as client, pytest.raises(Unreachable) as refused:
        client.latest("demo")
    assert "does it serve HTTPS?" in str(refused.value)
    code, out = cli(tmp_path, "ls", "--url", plain, "--token", TOKEN)
    assert code == 1
    assert "cannot reach tierd" in out
    assert "Traceback" not in out
    assert daemon.ready()
    assert [e for e in daemon.events() if e.get("level") in ("error", "critical")] == []


def test_the_docs_page_and_all_it_loads_come_from_the_daemon(daemon: Daemon, pki: Pki) -> None:
    """Swagger UI with no CDN: the page names only relative URLs, each answered by the daemon
    itself without a token (the daemon has tokens), the document included."""
    with httpx.Client(base_url=daemon.url, verify=tls_context(pki.ca)) as http:
        page = http.get("/v1/docs")
        assert page.status_code == 200
        html = page.text
        assert re.findall(r"https?://", html) == [], "an absolute URL: the page would ask another host"
        referenced = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
        assert len(referenced) == 4, referenced  # the CSS, the icon, the script, the document
        for reference in referenced:
            url = urljoin(f"{daemon.url}/v1/docs", reference)
            assert url.startswith(f"{daemon.url}/v1/"), url
            answer = http.get(url)
            assert answer.status_code == 200, (url, answer.status_code)
            assert answer.content, url
        document = http.get(urljoin(f"{daemon.url}/v1/docs", re.findall(r"url: '([^']+)'", html)[0]))
        assert document.json()["info"]["title"] == "tierd"
        assert "SwaggerUIBundle" in http.get("/v1/docs/swagger-ui-bundle.js").text


def test_client_certificates_required(pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tls_config(tmp_path, pki, client_ca_file=str(pki.ca))
    daemon = Daemon.prepare(tmp_path, data, verify=tls_context(pki.ca, client_cert=pki.client))
    daemon.start()
    try:
        daemon.wait_ready()
        with Client(daemon.url, TOKEN, ca_file=pki.ca) as anonymous, pytest.raises(Unreachable) as refused:
            anonymous.latest("demo")
        assert "client certificate" in str(refused.value)
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{daemon.url}/healthz", verify=tls_context(pki.ca))
        with Client(daemon.url, TOKEN, verify=tls_context(pki.ca, client_cert=pki.client)) as client:
            assert client.latest("demo") is None
        monkeypatch.setenv("TIERD_CLIENT_CERT", str(pki.client))
        code, out = cli(tmp_path, "ls", "--config", str(daemon.config_path), "--token", TOKEN)
        assert code == 0, out
    finally:
        daemon.stop()


def test_a_key_that_does_not_match_the_certificate_stops_the_daemon(pki: Pki, tmp_path: Path) -> None:
    stranger = trustme.CA().issue_cert("127.0.0.1")
    stranger.private_key_pem.write_to_path(str(tmp_path / "stranger.key"))
    data = tls_config(tmp_path, pki)
    data["api"]["tls"]["key_file"] = str(tmp_path / "stranger.key")
    daemon = Daemon.prepare(tmp_path, data)
    daemon.start()
    assert daemon.wait(60) == 78
    assert f"api.tls.key_file: {tmp_path / 'stranger.key'} does not match the certificate" in daemon.tail()


def test_no_tokens_on_an_address_others_reach_stops_the_daemon(tmp_path: Path) -> None:
    """Refused before the socket is bound: the wildcard address is never listened on."""
    daemon = Daemon.prepare(tmp_path, posix_config_dict(tmp_path, api={"listen": f"0.0.0.0:{free_port()}"}))
    daemon.start()
    assert daemon.wait(60) == 78
    message = daemon.tail()
    assert "api.tokens: empty, and api.listen (0.0.0.0:" in message
    assert "api.allow_anonymous: true" in message
