"""Small-object requests without botocore's per-request machinery.

botocore spends over a millisecond of CPU on each request (event hooks, parameter
validation, serialisation, endpoint rules, response parsing). On two cores that, not the
network, bounds how many small objects tierd moves per second. For the three requests a
small object needs -- PutObject, HeadObject and the ranged GetObject that opens a reader --
``LeanRequests`` builds the HTTP request itself. It signs it with awscrt's SigV4 signer
(what botocore's CRT signer calls, without its ~120 us of conversions per request) with
the credentials, region and signing name botocore uses, unsigned payload as the client is
configured, and sends it on the client's own aiohttp session, so the connection pool, TLS
settings and timeouts stay the client's. A bucket reached through a proxy is left to botocore.

What it cannot know it learns from botocore. A bucket's object URL, signing region and
signing name come from the client's own requests (its ``before-sign`` event), so endpoint
rules, addressing style and region redirects stay botocore's. The caller sends a request
through botocore instead (with botocore's retries) when:

- the bucket has not been seen yet;
- the request got no plain answer: a redirect, a throttle, a 5xx, a dropped connection.

A definite 4xx (404, 403, 416, ...) is parsed by botocore's own parser into the
ClientError the client would have raised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from awscrt import auth as crt_auth
from awscrt import http as crt_http
from botocore.exceptions import ClientError
from botocore.parsers import create_parser
from botocore.utils import percent_encode
from yarl import URL

from tierd.daemon.backends.s3.client import parse_timestamp
from tierd.daemon.backends.s3.errors import translate
from tierd.errors import TransientBackendError
from tierd.logs import get_logger

__all__ = ["LeanRequests", "NotAttached", "Prepared", "Route", "object_path"]

log = get_logger(__name__)

SIGNATURE = "s3v4"
DEFAULT_PORTS = {"http": 80, "https": 443}
OPERATIONS = ("PutObject", "HeadObject", "GetObject")
#: User metadata's headers (botocore's ``Metadata``, named without it).
META_PREFIX = "x-amz-meta-"


def object_path(key: str) -> str:
    """A key as botocore puts it in a URL path."""
    path: str = percent_encode(key, safe="/~")
    return path


@dataclass(frozen=True)
class Route:
    """Where a bucket's objects live and how requests to them are signed."""

    origin: str  # scheme://netloc
    base_path: str  # the object path up to the key
    host: str  # the Host header, as botocore signs it
    region: str
    signing_name: str
    user_agent: str | None

    @classmethod
    def of(cls, base: str, region: str, signing_name: str, user_agent: str | None) -> Route:
        """The route whose object URLs are ``base`` + the encoded key."""
        parts = urlsplit(base)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"  # IPv6
        if parts.port is not None and parts.port != DEFAULT_PORTS.get(parts.scheme):
            host = f"{host}:{parts.port}"
        return cls(f"{parts.scheme}://{parts.netloc}", parts.path, host, region, signing_name, user_agent)


def sign(
    method: str,
    route: Route,
    path: str,
    headers: list[tuple[str, str]],
    credentials: Any,
    when: datetime | None = None,
) -> list[tuple[str, str]]:
    """``headers`` plus Host, X-Amz-Date, x-amz-content-sha256 (unsigned payload) and Authorization."""
    config = crt_auth.AwsSigningConfig(
        algorithm=crt_auth.AwsSigningAlgorithm.V4,
        signature_type=crt_auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
        credentials_provider=crt_auth.AwsCredentialsProvider.new_static(
            credentials.access_key, credentials.secret_key, credentials.token
        ),
        region=route.region,
        service=route.signing_name,
        date=when or datetime.now(UTC),
        use_double_uri_encode=False,  # S3 paths are encoded once
        should_normalize_uri_path=False,
        signed_body_value=crt_auth.AwsSignedBodyValue.UNSIGNED_PAYLOAD,
        signed_body_header_type=crt_auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256,
    )
    request = crt_http.HttpRequest(method, path, crt_http.HttpHeaders([("host", route.host), *headers]))
    crt_auth.aws_sign_request(request, config).result()
    return list(request.headers)


@dataclass(frozen=True)
class NotAttached:
    """Why lean requests do not ride on a client; ``unexpected`` when botocore's internals changed."""

    reason: str
    unexpected: bool


@dataclass(frozen=True)
class Prepared:
    """A signed request: where it goes and its headers."""

    origin: str  # scheme://netloc
    path: str  # encoded, as signed
    headers: list[tuple[str, str]]


@dataclass(frozen=True)
class Answer:
    """A store's answer: status, headers (case-insensitive) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class LeanRequests:
    """PutObject, HeadObject and ranged GetObject of one client's buckets, sent directly."""

    def __init__(self, client: Any, http_session: Any, credentials: Any) -> None:
        self._http, self._credentials = http_session, credentials
        model = client.meta.service_model
        self._parser = create_parser(model.metadata["protocol"])
        self._outputs = {name: model.operation_model(name).output_shape for name in OPERATIONS}
        self._routes: dict[str, Route] = {}
        self.observers: list[Callable[[str], None]] = []
        self.requests: Counter[str] = Counter()  # requests sent the lean way, by operation

    @property
    def http_session(self) -> Any:
        """The client's aiobotocore HTTP session."""
        return self._http

    @classmethod
    def attach(cls, client: Any) -> LeanRequests | NotAttached:
        """Lean requests riding on ``client``, or why they cannot.

        ``NotAttached.unexpected`` is set when botocore's private attributes this reads
        (``_endpoint.http_session`` with ``_get_session`` and ``_proxy_config``,
        ``_request_signer._credentials``) are not there: an aiobotocore or botocore upgrade.
        """
        http_session = getattr(getattr(client, "_endpoint", None), "http_session", None)
        signer: Any = getattr(client, "_request_signer", None)
        if not callable(getattr(http_session, "_get_session", None)):
            return NotAttached("the client has no _endpoint.http_session._get_session", unexpected=True)
        if not callable(getattr(getattr(http_session, "_proxy_config", None), "proxy_url_for", None)):
            return NotAttached(
                "the client's HTTP session has no _proxy_config.proxy_url_for", unexpected=True
            )
        if not hasattr(signer, "_credentials"):
            return NotAttached("the client has no _request_signer._credentials", unexpected=True)
        if signer._credentials is None:
            return NotAttached("no credentials: botocore does everything", unexpected=False)
        if client.meta.config.s3.get("payload_signing_enabled") is not False:
            return NotAttached(
                "payload signing is on: the payload would have to be signed too", unexpected=False
            )
        lean = cls(client, http_session, signer._credentials)
        client.meta.events.register("before-sign.s3", lean._learn)
        return lean

    def _learn(
        self, request: Any, signing_name: str, region_name: str, signature_version: Any, **_: Any
    ) -> None:
        """Remember a bucket's route from a request botocore is about to sign."""
        params = request.context.get("input_params") or {}
        bucket, key = params.get("Bucket"), params.get("Key")
        if signature_version != SIGNATURE or not isinstance(bucket, str) or not isinstance(key, str):
            return  # SigV4a, S3 Express, unsigned, or not an object request
        tail = object_path(key)
        url: str = request.url
        if not key or "?" in url or not url.endswith("/" + tail):
            return
        if self._http._proxy_config.proxy_url_for(url):
            return  # through a proxy: botocore's way, proxy settings and all
        agent = request.headers.get("User-Agent")
        agent = agent.decode() if isinstance(agent, bytes) else agent
        self._routes[bucket] = Route.of(url[: len(url) - len(tail)], region_name, signing_name, agent)

    def knows(self, bucket: str) -> bool:
        """Whether requests to ``bucket`` can go the lean way."""
        return bucket in self._routes

    async def put(
        self,
        bucket: str,
        key: str,
        body: bytes,
        crc64nvme: str,
        content_md5: str | None = None,
        metadata: Mapping[str, str] | None = None,
        placement: Sequence[tuple[str, str]] = (),
    ) -> dict[str, str] | None:
        """PutObject with the CRC64NVME and user ``metadata``; the store's ETag and CRC64NVME, if any.

        ``placement``: the storage class and encryption headers (``s3.placement``), sent as given.
        """
        headers = [("x-amz-sdk-checksum-algorithm", "CRC64NVME"), ("x-amz-checksum-crc64nvme", crc64nvme)]
        if content_md5 is not None:
            headers.append(("Content-MD5", content_md5))
        headers.extend((META_PREFIX + name, value) for name, value in (metadata or {}).items())
        headers.extend(placement)
        answer = await self._send("PutObject", bucket, key, "PUT", headers, body)
        if answer is None:
            return None
        return _present(answer.headers, {"ETag": "etag", "ChecksumCRC64NVME": "x-amz-checksum-crc64nvme"})

    async def head(self, bucket: str, key: str) -> dict[str, Any] | None:
        """HeadObject with ``ChecksumMode=ENABLED``, shaped as botocore's answer."""
        answer = await self._send("HeadObject", bucket, key, "HEAD", [("x-amz-checksum-mode", "ENABLED")])
        if answer is None:
            return None
        headers = answer.headers
        if "content-length" not in headers or "last-modified" not in headers:
            return None  # an unusual answer: let botocore make of it what it does
        fields: dict[str, Any] = _present(
            headers, {"ETag": "etag", "ChecksumCRC64NVME": "x-amz-checksum-crc64nvme"}
        )
        fields["ContentLength"] = int(headers["content-length"])
        fields["LastModified"] = parse_timestamp(headers["last-modified"])
        fields["Metadata"] = {
            name[len(META_PREFIX) :]: value
            for name, value in headers.items()
            if name.lower().startswith(META_PREFIX)
        }
        return fields

    async def get(self, bucket: str, key: str, first: int, last: int) -> tuple[dict[str, Any], bytes] | None:
        """GetObject of bytes ``first``..``last``, read whole: (headers as botocore names them, body)."""
        headers = [("Range", f"bytes={first}-{last}")]
        answer = await self._send("GetObject", bucket, key, "GET", headers, limit=last - first + 1)
        if answer is None:
            return None
        fields: dict[str, Any] = _present(answer.headers, {"ETag": "etag", "ContentRange": "content-range"})
        fields["ContentLength"] = len(answer.body)
        return fields, answer.body

    async def prepare(
        self, bucket: str, key: str, method: str, headers: list[tuple[str, str]]
    ) -> Prepared | None:
        """The signed request; None while the bucket's route is unknown (its sender calls ``sent``)."""
        route = self._routes.get(bucket)
        if route is None:
            return None
        path = route.base_path + object_path(key)
        credentials = await self._credentials.get_frozen_credentials()
        signed = sign(method, route, path, headers, credentials)
        if route.user_agent:
            signed.append(("User-Agent", route.user_agent))  # never signed, as botocore does not
        return Prepared(route.origin, path, signed)

    def sent(self, operation: str, count: int = 1) -> None:
        """Count ``count`` requests of ``operation`` on their way, and tell the observers."""
        self.requests[operation] += count
        for observe in self.observers:
            for _ in range(count):
                observe(operation)

    async def _send(
        self,
        operation: str,
        bucket: str,
        key: str,
        method: str,
        headers: list[tuple[str, str]],
        body: bytes = b"",
        *,
        limit: int | None = None,
    ) -> Answer | None:
        """The store's 2xx answer, its body read (if no longer than ``limit``, when given).

        None when botocore should send the request instead: the route is unknown, the
        connection failed, the answer is a redirect, a throttle, a 5xx, or a 2xx body
        longer than ``limit`` (a store ignoring a Range). Raises the ClientError botocore
        would raise for a definite 4xx.
        """
        request = await self.prepare(bucket, key, method, headers)
        if request is None:
            return None
        self.sent(operation)
        try:
            answer = await self._exchange(method, request.origin + request.path, request.headers, body, limit)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # botocore's retries take over
            log.debug("lean_request_failed", operation=operation, bucket=bucket, error=repr(exc))
            return None
        if answer is None or answer.status < 300:
            return answer
        error = self._error(operation, answer)
        if answer.status < 400 or isinstance(translate(error, operation, bucket), TransientBackendError):
            log.debug("lean_request_redone", operation=operation, bucket=bucket, status=answer.status)
            return None
        raise error

    async def _exchange(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes, limit: int | None
    ) -> Answer | None:
        """One request on the client's own aiohttp session; None for a 2xx body past ``limit``."""
        session = await self._http._get_session(None)
        async with session.request(
            method, URL(url, encoded=True), headers=headers, data=body or None
        ) as response:
            length = response.content_length
            if limit is not None and response.status < 300 and (length is None or length > limit):
                response.close()  # the whole of a big object, or no length: botocore reads part of it
                return None
            return Answer(response.status, response.headers, await response.read())

    def _error(self, operation: str, answer: Answer) -> ClientError:
        response = {"status_code": answer.status, "headers": answer.headers, "body": answer.body}
        return ClientError(self._parser.parse(response, self._outputs[operation]), operation)


def _present(headers: Mapping[str, str], names: Mapping[str, str]) -> dict[str, Any]:
    """The ``headers`` that are there, under botocore's names."""
    return {name: headers[header] for name, header in names.items() if header in headers}
