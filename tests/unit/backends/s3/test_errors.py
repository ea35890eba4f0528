"""botocore, aiohttp and awscrt errors become tierd errors at the S3 backend's one boundary."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from awscrt.exceptions import AwsCrtError
from botocore import exceptions as boto

from tierd.daemon.backends.s3.errors import s3_errors, translate
from tierd.errors import (
    IntegrityError,
    NotFound,
    PermanentBackendError,
    TierdError,
    TransientBackendError,
)


def client_error(code: str, status: int) -> boto.ClientError:
    return boto.ClientError(
        {"Error": {"Code": code, "Message": "msg"}, "ResponseMetadata": {"HTTPStatusCode": status}},  # type: ignore[typeddict-item]
        "HeadObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchKey", 404, NotFound),
        ("404", 404, NotFound),  # HEAD has no body: only the status
        ("NoSuchUpload", 404, NotFound),
        ("NoSuchBucket", 404, PermanentBackendError),
        ("AccessDenied", 403, PermanentBackendError),
        ("InvalidAccessKeyId", 403, PermanentBackendError),
        ("SignatureDoesNotMatch", 403, PermanentBackendError),
        ("InvalidRequest", 400, PermanentBackendError),
        ("PreconditionFailed", 412, TransientBackendError),  # changed since open: open again
        ("SlowDown", 503, TransientBackendError),
        ("Throttling", 400, TransientBackendError),
        ("RequestTimeout", 400, TransientBackendError),
        ("InternalError", 500, TransientBackendError),
        ("InvalidPart", 400, TransientBackendError),  # the next try sends that part again
        ("", 502, TransientBackendError),
        ("TooManyRequests", 429, TransientBackendError),
        ("BadDigest", 400, IntegrityError),
        ("InvalidDigest", 400, IntegrityError),
    ],
)
def test_client_errors(code: str, status: int, expected: type[TierdError]) -> None:
    error = translate(client_error(code, status), "stat", "s3://b/k")
    assert type(error) is expected
    assert "s3://b/k" in str(error)


@pytest.mark.parametrize(
    ("code", "status", "said"),
    [
        ("AccessDenied", 403, "stat s3://b/k: 403 AccessDenied msg"),
        ("SlowDown", 503, "stat s3://b/k: 503 SlowDown msg"),
        ("403", 403, "stat s3://b/k: 403 msg"),  # HEAD: the status is the code
        ("Throttling", 0, "stat s3://b/k: Throttling msg"),
    ],
)
def test_client_errors_name_the_stores_answer(code: str, status: int, said: str) -> None:
    assert str(translate(client_error(code, status), "stat", "s3://b/k")) == said


def test_a_connection_error_says_what_aiohttp_said() -> None:
    reset = aiohttp.ClientOSError(104, "Connection reset by peer")
    error = translate(
        boto.EndpointConnectionError(endpoint_url="http://x/b/k", error=reset), "put", "s3://b/k"
    )
    assert isinstance(error, TransientBackendError)
    assert str(error).endswith("(ClientOSError: [Errno 104] Connection reset by peer)")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (boto.EndpointConnectionError(endpoint_url="http://x"), TransientBackendError),
        (boto.ConnectTimeoutError(endpoint_url="http://x"), TransientBackendError),
        (boto.ReadTimeoutError(endpoint_url="http://x"), TransientBackendError),
        (boto.ResponseStreamingError(error="reset"), TransientBackendError),
        (boto.IncompleteReadError(actual_bytes=1, expected_bytes=2), TransientBackendError),
        (boto.NoCredentialsError(), PermanentBackendError),
        (boto.ParamValidationError(report="bad"), PermanentBackendError),
        (boto.FlexibleChecksumError(error_msg="crc"), IntegrityError),
        (aiohttp.ServerDisconnectedError(), TransientBackendError),
        (aiohttp.ClientPayloadError("cut"), TransientBackendError),
        (TimeoutError(), TransientBackendError),
        (ConnectionResetError(), TransientBackendError),
        (AwsCrtError(code=34, name="AWS_ERROR_INVALID_ARGUMENT", message="bad"), PermanentBackendError),
    ],
)
def test_transport_and_client_side_errors(exc: Exception, expected: type[TierdError]) -> None:
    assert type(translate(exc, "put", "s3://b/k")) is expected


def test_other_exceptions_pass_through() -> None:
    assert translate(KeyError("x"), "put", "s3://b/k") is None
    with pytest.raises(KeyError), s3_errors("put", "s3://b/k"):
        raise KeyError("x")
    with pytest.raises(asyncio.CancelledError), s3_errors("put", "s3://b/k"):
        raise asyncio.CancelledError
    with pytest.raises(NotFound) as caught, s3_errors("stat", "s3://b/k"):
        raise client_error("NoSuchKey", 404)
    assert isinstance(caught.value.__cause__, boto.ClientError)
