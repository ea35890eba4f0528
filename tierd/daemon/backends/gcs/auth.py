"""Google credentials for the JSON API: a bearer token per request, refreshed before it expires.

Where they come from (``credentials_for``), first found: the tier's ``credentials_file``,
``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application default credentials file, else the
metadata server of the GCE/GKE node. An emulator (the tier's ``endpoint_url`` or
``STORAGE_EMULATOR_HOST``) without a ``credentials_file`` takes none (``Anonymous``).

A file is a service account's key (``type: service_account``: a JWT signed RS256 with its
private key is exchanged at its ``token_uri``) or a user's refresh token (``type:
authorized_user``, what ``gcloud auth application-default login`` writes). No google-auth:
it pulls in its own HTTP stack; two POSTs and one signature are all tierd needs.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from tierd.errors import PermanentBackendError, TransientBackendError

__all__ = ["Anonymous", "Credentials", "MetadataServer", "TokenCredentials", "credentials_for", "from_file"]

SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"  # noqa: S105 (a URL, not a secret)
METADATA_TOKEN_URL = (
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"  # noqa: S105
)
#: A token this close to its expiry is refreshed first (seconds).
REFRESH_MARGIN = 300
ADC_FILE = Path.home() / ".config" / "gcloud" / "application_default_credentials.json"


class Credentials(Protocol):
    """What signs a request: its ``Authorization`` header (none for an emulator)."""

    async def headers(self, http: httpx.AsyncClient) -> dict[str, str]:
        """The headers to add; raises Transient/PermanentBackendError when no token can be had."""
        ...


class Anonymous:
    """No credentials: an emulator."""

    async def headers(self, http: httpx.AsyncClient) -> dict[str, str]:
        """Nothing to add."""
        return {}


@dataclass
class TokenCredentials:
    """An OAuth2 access token obtained by a POST to ``token_uri`` and kept until near expiry."""

    token_uri: str
    form: dict[str, str] | None = None  # a refresh token's grant
    service_account: dict[str, str] | None = None  # a key file: the grant is a fresh signed JWT
    _token: str = field(default="", repr=False)
    _expires: float = 0.0

    async def headers(self, http: httpx.AsyncClient) -> dict[str, str]:
        """``Authorization: Bearer <token>``, refreshing the token when it is near expiry."""
        if time.monotonic() > self._expires - REFRESH_MARGIN:
            form = self.form if self.service_account is None else jwt_grant(self.service_account)
            answer = await _token_request(http, "POST", self.token_uri, data=form or {})
            self._token = str(answer["access_token"])
            self._expires = time.monotonic() + float(answer.get("expires_in", 3600))
        return {"Authorization": f"Bearer {self._token}"}


@dataclass
class MetadataServer:
    """The node's service account, through the GCE metadata server."""

    url: str = METADATA_TOKEN_URL
    _token: str = field(default="", repr=False)
    _expires: float = 0.0

    async def headers(self, http: httpx.AsyncClient) -> dict[str, str]:
        """``Authorization: Bearer <token>`` from the metadata server."""
        if time.monotonic() > self._expires - REFRESH_MARGIN:
            answer = await _token_request(http, "GET", self.url, headers={"Metadata-Flavor": "Google"})
            self._token = str(answer["access_token"])
            self._expires = time.monotonic() + float(answer.get("expires_in", 3600))
        return {"Authorization": f"Bearer {self._token}"}


async def _token_request(http: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
    try:
        response = await http.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise TransientBackendError(f"GCS credentials: {url} unreachable: {exc}") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise TransientBackendError(f"GCS credentials: {url} answered {response.status_code}")
    if response.status_code != 200:
        raise PermanentBackendError(
            f"GCS credentials: {url} refused the grant ({response.status_code}): {response.text[:200]}"
        )
    answer: dict[str, Any] = response.json()
    if "access_token" not in answer:
        raise PermanentBackendError(f"GCS credentials: {url} answered without an access_token")
    return answer


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def jwt_grant(key: dict[str, str]) -> dict[str, str]:
    """The JWT-bearer grant of a service account's key: a claim set signed RS256 (RFC 7523)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "kid": key.get("private_key_id", "")}
    claims = {
        "iss": key["client_email"],
        "scope": SCOPE,
        "aud": key.get("token_uri", GOOGLE_TOKEN_URI),
        "iat": now,
        "exp": now + 3600,
    }
    signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
    private = serialization.load_pem_private_key(key["private_key"].encode(), password=None)
    if not isinstance(private, rsa.RSAPrivateKey):
        raise PermanentBackendError("GCS credentials: the service account's private_key is not RSA")
    signature = private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return {
        "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
        "assertion": f"{signing_input}.{_b64url(signature)}",
    }


def from_file(path: Path) -> TokenCredentials:
    """Credentials from a service account's key or an ``authorized_user`` file.

    Raises PermanentBackendError naming the file and what is wrong with it.
    """
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PermanentBackendError(f"GCS credentials file {path}: cannot read it: {exc}") from exc
    kind = info.get("type") if isinstance(info, dict) else None
    try:
        if kind == "service_account":
            key = {k: str(info[k]) for k in ("client_email", "private_key")}
            key["token_uri"] = str(info.get("token_uri", GOOGLE_TOKEN_URI))
            key["private_key_id"] = str(info.get("private_key_id", ""))
            return TokenCredentials(key["token_uri"], service_account=key)
        if kind == "authorized_user":
            form = {k: str(info[k]) for k in ("client_id", "client_secret", "refresh_token")}
            form["grant_type"] = "refresh_token"
            return TokenCredentials(str(info.get("token_uri", GOOGLE_TOKEN_URI)), form=form)
    except KeyError as exc:
        raise PermanentBackendError(f"GCS credentials file {path}: {exc.args[0]} is missing") from exc
    raise PermanentBackendError(
        f"GCS credentials file {path}: type {kind!r} is not service_account or authorized_user"
    )


def credentials_for(credentials_file: Path | None, *, emulator: bool) -> Credentials:
    """The credentials a tier uses (see the module docstring for the order)."""
    if credentials_file is not None:
        return from_file(credentials_file)
    if emulator:
        return Anonymous()
    named = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if named:
        return from_file(Path(named))
    if ADC_FILE.is_file():
        return from_file(ADC_FILE)
    return MetadataServer()
