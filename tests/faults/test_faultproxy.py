"""The fault proxy itself: a plain relay, each fault as a client sees it, pipelining, counts."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from tests.fixtures.faultproxy import ACCESS_DENIED, SLOW_DOWN, Fault, FaultProxy, Rule, operation_of
from tests.fixtures.s3servers import ACCESS_KEY, REGION, SECRET_KEY, S3Server


@pytest.fixture
def proxied(rclone_server: S3Server) -> Iterator[tuple[FaultProxy, S3Server, str]]:
    """A proxy in front of rclone, a client through it, and a bucket holding ``a`` and ``b``."""
    bucket = rclone_server.create_bucket()
    direct = rclone_server.client()
    direct.put_object(Bucket=bucket, Key="a", Body=b"A" * 1000)
    direct.put_object(Bucket=bucket, Key="b", Body=b"B" * 2000)
    with FaultProxy(rclone_server.endpoint_url) as proxy:
        yield proxy, S3Server("proxied", proxy.endpoint_url), bucket


def test_operations_are_told_apart() -> None:
    cases = {
        ("PUT", "/b/k", ""): "PutObject",
        ("PUT", "/b/k", "partNumber=1&uploadId=x"): "UploadPart",
        ("POST", "/b/k", "uploads="): "CreateMultipartUpload",
        ("POST", "/b/k", "uploadId=x"): "CompleteMultipartUpload",
        ("GET", "/b/k", ""): "GetObject",
        ("HEAD", "/b/k", ""): "HeadObject",
        ("GET", "/b", "list-type=2"): "ListObjects",
    }
    for (method, path, query), operation in cases.items():
        parsed = {name: [""] for name in (p.split("=")[0] for p in query.split("&") if p)}
        assert operation_of(method, path, parsed) == operation


def test_relays_and_counts(proxied: tuple[FaultProxy, S3Server, str]) -> None:
    proxy, through, bucket = proxied
    client = through.client()
    client.put_object(Bucket=bucket, Key="c", Body=b"C" * 3000)
    assert client.get_object(Bucket=bucket, Key="c")["Body"].read() == b"C" * 3000
    assert client.head_object(Bucket=bucket, Key="a")["ContentLength"] == 1000
    assert [proxy.count(op) for op in ("PutObject", "GetObject", "HeadObject")] == [1, 1, 1]
    assert proxy.fired == []


def test_status_faults_hit_the_nth_request_only(proxied: tuple[FaultProxy, S3Server, str]) -> None:
    proxy, through, bucket = proxied
    proxy.set_rules([Rule(ACCESS_DENIED, operation="GetObject", key="b", nth=2)])
    client = through.client()
    assert client.get_object(Bucket=bucket, Key="b")["Body"].read() == b"B" * 2000
    with pytest.raises(ClientError) as denied:
        client.get_object(Bucket=bucket, Key="b")
    assert denied.value.response["Error"]["Code"] == "AccessDenied"
    assert client.get_object(Bucket=bucket, Key="a")["Body"].read() == b"A" * 1000  # another key
    assert client.get_object(Bucket=bucket, Key="b")["Body"].read() == b"B" * 2000
    assert proxy.fired == [("GetObject", "403 AccessDenied")]


def test_botocore_retries_a_slow_down_once(proxied: tuple[FaultProxy, S3Server, str]) -> None:
    proxy, through, bucket = proxied
    proxy.set_rules([Rule(SLOW_DOWN, operation="GetObject")])
    with pytest.raises(ClientError) as slow:
        through.client().get_object(Bucket=bucket, Key="a")
    assert slow.value.response["Error"]["Code"] == "SlowDown"
    # botocore's ``max_attempts`` (the fixture client's 2) counts retries: three sends.
    # tierd sets ``total_max_attempts`` (tests/faults/test_attempts.py).
    assert proxy.count("GetObject") == 3


def _raw_get(port: int, requests: bytes, *, half_close: bool = True) -> bytes:
    """Send ``requests`` in one write and read until the proxy closes the connection.

    ``half_close``: say that nothing more comes (the proxy closes once it has answered);
    without it, only a fault ends the connection (no race with a reset on its way).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(requests)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        got = bytearray()
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except ConnectionResetError:
            got += b"<RST>"
        return bytes(got)


def _gets(proxy: FaultProxy, bucket: str, keys: list[str]) -> bytes:
    """Presigned (SigV4) GETs of ``keys`` through the proxy, for one write on one connection."""
    client = boto3.client(
        "s3",
        endpoint_url=proxy.endpoint_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=BotoConfig(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    host = proxy.endpoint_url.removeprefix("http://")
    out = b""
    for key in keys:
        url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
        out += f"GET {url.removeprefix(proxy.endpoint_url)} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    client.close()
    return out


def test_pipelined_requests_are_answered_in_order(proxied: tuple[FaultProxy, S3Server, str]) -> None:
    proxy, _, bucket = proxied
    port = int(proxy.endpoint_url.rsplit(":", 1)[1])
    proxy.set_rules([Rule(Fault.error(500, "InternalError"), key="b")])
    answers = _raw_get(port, _gets(proxy, bucket, ["a", "b", "a"]))
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answers)
    assert statuses == [b"200", b"500", b"200"]
    assert answers.count(b"A" * 1000) == 2
    assert (proxy.count("GetObject"), proxy.pipelined["GetObject"]) == (3, 2)


@pytest.mark.parametrize("kind", ["reset_response", "truncate"])
def test_cut_answers(proxied: tuple[FaultProxy, S3Server, str], kind: str) -> None:
    proxy, _, bucket = proxied
    port = int(proxy.endpoint_url.rsplit(":", 1)[1])
    whole = _raw_get(port, _gets(proxy, bucket, ["a"]))
    proxy.set_rules([Rule(Fault(kind))])  # type: ignore[arg-type]
    cut = _raw_get(port, _gets(proxy, bucket, ["a", "a"]), half_close=False)
    assert whole.count(b"HTTP/1.1 ") == 1
    assert cut.count(b"HTTP/1.1 ") == 1
    assert cut.endswith(b"<RST>") == (kind == "reset_response")
    assert len(cut.removesuffix(b"<RST>")) < len(whole)


def test_wrong_headers(proxied: tuple[FaultProxy, S3Server, str]) -> None:
    proxy, through, bucket = proxied
    client = through.client()
    proxy.set_rules(
        [Rule(Fault("etag"), operation="HeadObject"), Rule(Fault("checksum"), operation="GetObject")]
    )
    assert client.head_object(Bucket=bucket, Key="a")["ETag"] == '"00000000000000000000000000000bad"'
    got = client.get_object(Bucket=bucket, Key="a", ChecksumMode="ENABLED")
    assert got["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-crc64nvme"] == "3SWlJl5nwms="


def test_a_stall_lasts_until_released(proxied: tuple[FaultProxy, S3Server, str]) -> None:
    proxy, _, bucket = proxied
    port = int(proxy.endpoint_url.rsplit(":", 1)[1])
    proxy.set_rules([Rule(Fault("stall", seconds=0.3))])
    started = time.monotonic()
    answers = _raw_get(port, _gets(proxy, bucket, ["a"]))
    assert answers.count(b"HTTP/1.1 ") == 1
    assert time.monotonic() - started >= 0.3
    proxy.set_rules([Rule(Fault("stall"))])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_gets(proxy, bucket, ["a"]))
        sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        proxy.release()
        sock.settimeout(5)
        assert sock.recv(10).startswith(b"HTTP/1.1")
