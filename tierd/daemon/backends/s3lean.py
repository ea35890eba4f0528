"""Small-object requests without botocore's per-request machinery.

botocore spends over a millisecond of CPU on each request (event hooks, parameter
validation, serialisation, endpoint rules, response parsing). On two cores that, not the
network, bounds how many small objects tierd moves per second. For the three requests a
small object needs -- PutObject, HeadObject and the ranged GetObject that opens a reader --
``LeanRequests`` builds the HTTP request itself. It signs it with the signer class,
credentials, region and User-Agent botocore uses, and sends it through the client's own
HTTP session, so the pool, TLS settings, proxies and timeouts stay the client's.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore import auth as botocore_auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import create_parser
from botocore.utils import percent_encode

from tierd.daemon.backends.s3client import parse_timestamp
from tierd.daemon.backends.s3errors import translate
from tierd.errors import TransientBackendError
from tierd.logs import get_logger

__all__ = ["LeanRequests", "Route", "object_path"]

log = get_logger(__name__)

SIGNATURE = "s3v4"
OPERATIONS = ("PutObject", "HeadObject", "GetObject")


def object_path(key: str) -> str:
    """A key as botocore puts it in a URL path."""
    path: str = percent_encode(key, safe="/~")
    return path


@dataclass(frozen=True)
class Route:
    """Where a bucket's objects live and how requests to them are signed."""

    base: str  # the object URL up to the key
    region: str
    signing_name: str
    user_agent: str | None


class LeanRequests:
    """PutObject, HeadObject and ranged GetObject of one client's buckets, sent directly."""

    def __init__(self, client: Any, http_session: Any, credentials: Any) -> None:
        self._http, self._credentials = http_session, credentials
        self._config = client.meta.config
        model = client.meta.service_model
        self._parser = create_parser(model.metadata["protocol"])
        self._outputs = {name: model.operation_model(name).output_shape for name in OPERATIONS}
        self._routes: dict[str, Route] = {}
        self.observers: list[Callable[[str], None]] = []

    @classmethod
    def attach(cls, client: Any) -> LeanRequests | None:
        """Lean requests riding on ``client``; None if its internals are not as expected."""
        http_session = getattr(getattr(client, "_endpoint", None), "http_session", None)
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        if not callable(getattr(http_session, "send", None)) or credentials is None:
            return None  # another HTTP layer, or anonymous access: botocore does everything
        if SIGNATURE not in botocore_auth.AUTH_TYPE_MAPS:
            return None
        lean = cls(client, http_session, credentials)
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
        agent = request.headers.get("User-Agent")
        agent = agent.decode() if isinstance(agent, bytes) else agent
        self._routes[bucket] = Route(url[: len(url) - len(tail)], region_name, signing_name, agent)

    def knows(self, bucket: str) -> bool:
        """Whether requests to ``bucket`` can go the lean way."""
        return bucket in self._routes

    async def put(
        self, bucket: str, key: str, body: bytes, crc64nvme: str, content_md5: str | None = None
    ) -> dict[str, str] | None:
        """PutObject with the CRC64NVME; the ETag and the CRC64NVME the store reported, if any."""
        headers = {"x-amz-sdk-checksum-algorithm": "CRC64NVME", "x-amz-checksum-crc64nvme": crc64nvme}
        if content_md5 is not None:
            headers["Content-MD5"] = content_md5
        response = await self._send("PutObject", bucket, key, "PUT", headers, body)
        if response is None:
            return None
        return _present(response.headers, {"ETag": "etag", "ChecksumCRC64NVME": "x-amz-checksum-crc64nvme"})

    async def head(self, bucket: str, key: str) -> dict[str, Any] | None:
        """HeadObject with ``ChecksumMode=ENABLED``, shaped as botocore's answer."""
        response = await self._send("HeadObject", bucket, key, "HEAD", {"x-amz-checksum-mode": "ENABLED"})
        if response is None:
            return None
        headers = response.headers
        if "content-length" not in headers or "last-modified" not in headers:
            return None  # an unusual answer: let botocore make of it what it does
        answer: dict[str, Any] = _present(
            headers, {"ETag": "etag", "ChecksumCRC64NVME": "x-amz-checksum-crc64nvme"}
        )
        answer["ContentLength"] = int(headers["content-length"])
        answer["LastModified"] = parse_timestamp(headers["last-modified"])
        return answer

    async def get(self, bucket: str, key: str, first: int, last: int) -> tuple[dict[str, Any], bytes] | None:
        """GetObject of bytes ``first``..``last``, read whole: (headers as botocore names them, body)."""
        headers = {"Range": f"bytes={first}-{last}"}
        response = await self._send("GetObject", bucket, key, "GET", headers, stream=True)
        if response is None:
            return None
        headers = response.headers
        if int(headers.get("content-length", -1)) not in range(last - first + 2):
            response.raw.close()  # no length, or the whole of a big object: botocore reads part of it
            return None
        answer: dict[str, Any] = _present(headers, {"ETag": "etag", "ContentRange": "content-range"})
        answer["ContentLength"] = int(headers["content-length"])
        return answer, await response.content

    async def _send(
        self,
        operation: str,
        bucket: str,
        key: str,
        method: str,
        headers: dict[str, str],
        body: bytes = b"",
        *,
        stream: bool = False,
    ) -> Any | None:
        """The store's 2xx answer (its body unread if ``stream``); None when botocore should send it.

        Raises the ClientError botocore would raise for a definite 4xx.
        """
        route = self._routes.get(bucket)
        if route is None:
            return None
        if route.user_agent:
            headers["User-Agent"] = route.user_agent
        request = AWSRequest(method=method, url=route.base + object_path(key), headers=headers, data=body)
        request.context["client_config"] = self._config  # payload signing as the client does it
        credentials = await self._credentials.get_frozen_credentials()
        signer: Any = botocore_auth.AUTH_TYPE_MAPS[SIGNATURE]  # the CRT signer when awscrt is there
        signer(credentials, route.signing_name, route.region).add_auth(request)
        for observe in self.observers:
            observe(operation)
        prepared = request.prepare()
        prepared.stream_output = stream
        try:
            response = await self._http.send(prepared)
        except BotoCoreError as exc:  # connection trouble: botocore's retries take over
            log.debug("lean_request_failed", operation=operation, bucket=bucket, error=str(exc))
            return None
        status = response.status_code
        if status < 300:
            return response
        error = self._error(operation, status, response.headers, await response.content)
        if status < 400 or isinstance(translate(error, operation, bucket), TransientBackendError):
            log.debug("lean_request_redone", operation=operation, bucket=bucket, status=status)
            return None
        raise error

    def _error(self, operation: str, status: int, headers: Mapping[str, str], body: bytes) -> ClientError:
        parsed = self._parser.parse(
            {"status_code": status, "headers": headers, "body": body}, self._outputs[operation]
        )
        return ClientError(parsed, operation)


def _present(headers: Mapping[str, str], names: Mapping[str, str]) -> dict[str, Any]:
    """The ``headers`` that are there, under botocore's names."""
    return {name: headers[header] for name, header in names.items() if header in headers}
