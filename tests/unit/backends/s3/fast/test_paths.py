"""The fast path is a choice: what each setting and endpoint uses, and that it really attaches.

Against the real stores (moto's server, ``rclone serve s3``): with ``fast_path: auto`` the
lean requests and the endpoint cache must carry the requests (their own counters say so;
a botocore or aiobotocore upgrade that stops them attaching fails here); with a private
attribute they need taken away they step aside loudly and botocore does the work; with
``fast_path: off`` botocore does everything.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import MutableMapping
from typing import Any

import pytest
from awscrt import auth as crt_auth
from awscrt.exceptions import AwsCrtError
from pydantic import ValidationError
from structlog.testing import capture_logs

from tests.conformance.harness import crc
from tests.fixtures.s3servers import S3Server
from tierd.config import S3Tier
from tierd.daemon.backends import BytesReader, S3Backend, WriteRequest
from tierd.daemon.backends.s3.fast import FastPath, is_aws_endpoint, plan_for
from tierd.daemon.backends.s3.fast.endpoints import ReferencedOnly
from tierd.errors import PermanentBackendError

MIB = 1024 * 1024


def tier(**fields: Any) -> S3Tier:
    return S3Tier(name="s3", kind="s3", bucket="bkt", **fields)


@pytest.mark.parametrize(
    ("endpoint_url", "aws"),
    [
        (None, True),
        ("https://s3.amazonaws.com", True),
        ("https://bkt.s3.eu-west-1.amazonaws.com", True),
        ("https://s3.cn-north-1.amazonaws.com.cn", True),
        ("https://S3.AMAZONAWS.COM.", True),
        ("http://127.0.0.1:9000", False),
        ("https://minio.example.org", False),
        ("https://notamazonaws.com", False),
        ("https://amazonaws.com.evil.example", False),
    ],
)
def test_aws_endpoints_are_told_from_others(endpoint_url: str | None, aws: bool) -> None:
    assert is_aws_endpoint(endpoint_url) is aws


def test_auto_pipelines_only_off_aws_and_off_uses_nothing() -> None:
    custom = plan_for(tier(endpoint_url="http://127.0.0.1:9000"))
    assert (custom.lean, custom.pipelining, custom.endpoint_cache) == (True, True, True)
    aws = plan_for(tier())
    assert (aws.lean, aws.pipelining, aws.endpoint_cache) == (True, False, True)
    off = plan_for(tier(endpoint_url="http://127.0.0.1:9000", fast_path="off"))
    assert (off.lean, off.pipelining, off.endpoint_cache) == (False, False, False)


def test_fast_path_is_validated() -> None:
    assert tier().fast_path == "auto"
    with pytest.raises(ValidationError, match="fast_path"):
        tier(fast_path="sometimes")


async def round_trip(backend: S3Backend, name: str, size: int) -> None:
    """Write ``size`` random bytes and read them back through a reader."""
    data = os.urandom(size)
    await backend.write(WriteRequest(name, BytesReader(data), crc(data)))
    reader = await backend.open_reader(name)
    try:
        view = memoryview(bytearray(size))
        assert await reader.read_into(0, view) == size
        assert bytes(view) == data
    finally:
        await reader.close()


def s3_paths(logs: list[MutableMapping[str, Any]]) -> MutableMapping[str, Any]:
    (event,) = [entry for entry in logs if entry["event"] == "s3_paths"]
    return event


async def test_auto_really_takes_the_lean_path_and_the_endpoint_cache(s3_server: S3Server) -> None:
    backend = S3Backend(s3_server.new_tier())
    try:
        with capture_logs() as logs:
            for n in range(3):
                await round_trip(backend, f"small/{n}.bin", 5000 + n)
        fast = backend.fast_path
        assert fast.lean is not None, "lean requests did not attach: has botocore changed?"
        assert fast.endpoint_cache is not None, "the endpoint cache did not attach: has botocore changed?"
        assert fast.lean.requests["PutObject"] >= 2  # the first one teaches the bucket's route
        assert fast.lean.requests["GetObject"] >= 2
        assert fast.endpoint_cache.resolutions >= 1
        event = s3_paths(logs)
        assert (event["lean"], event["pipelining"], event["endpoint_cache"]) == (True, True, True)
        assert not [entry for entry in logs if entry["log_level"] == "warning"]
    finally:
        await backend.close()


@pytest.fixture
def attach_without(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names the private attributes (``holder.attribute`` of the client) hidden while attaching."""
    hidden: list[str] = []
    real = FastPath.attach.__func__  # type: ignore[attr-defined]

    def attach(cls: type[FastPath], client: Any, *args: Any, **kwargs: Any) -> FastPath:
        with pytest.MonkeyPatch.context() as patch:
            for dotted in hidden:
                holder, _, name = dotted.rpartition(".")
                patch.delattr(getattr(client, holder) if holder else client, name)
            attached: FastPath = real(cls, client, *args, **kwargs)
            return attached

    monkeypatch.setattr(FastPath, "attach", classmethod(attach))
    return hidden


@pytest.mark.parametrize(
    ("missing", "path"),
    [("_request_signer._credentials", "lean"), ("_ruleset_resolver", "endpoint_cache")],
)
async def test_a_missing_private_attribute_is_said_loudly_and_botocore_does_the_work(
    moto_server: S3Server, attach_without: list[str], missing: str, path: str
) -> None:
    attach_without.append(missing)
    backend = S3Backend(moto_server.new_tier())
    try:
        with capture_logs() as logs:
            await round_trip(backend, "a.bin", 3000)
            await round_trip(backend, "b.bin", 3000)
        (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
        assert warning["event"] == "s3_fast_path_not_attached"
        assert (warning["path"], warning["tier"]) == (path, "s3")
        assert missing.rpartition(".")[2] in warning["reason"]
        assert s3_paths(logs)[path] is False
        assert getattr(backend.fast_path, path) is None
    finally:
        await backend.close()


async def test_off_sends_every_request_through_botocore(s3_server: S3Server) -> None:
    backend = S3Backend(s3_server.new_tier(fast_path="off"))
    try:
        everything: Counter[str] = Counter()
        by_botocore: Counter[str] = Counter()
        with capture_logs() as logs:
            await backend.observe(lambda operation: everything.update([operation]))
        client = await backend.client()
        client.meta.events.register("before-call.s3", lambda model, **_: by_botocore.update([model.name]))
        for n in range(2):
            await round_trip(backend, f"small/{n}.bin", 4000 + n)
        await round_trip(backend, "big.bin", 2 * int(backend.tier.part_size) + 123)  # multipart
        files = {f"group/{n}.bin": os.urandom(2000 + n) for n in range(4)}
        for relpath, data in files.items():
            await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))
        views = [memoryview(bytearray(len(data))) for data in files.values()]
        assert await backend.read_whole(list(files), views) == [None] * len(files)
        assert [bytes(view) for view in views] == list(files.values())
        assert everything == by_botocore  # not one request the lean or pipelined way
        assert everything["GetObject"] >= 7
        fast = backend.fast_path
        assert (fast.lean, fast.pipeline, fast.endpoint_cache) == (None, None, None)
        assert not isinstance(client._ruleset_resolver._provider, ReferencedOnly)  # type: ignore[attr-defined]
        event = s3_paths(logs)
        assert (event["lean"], event["pipelining"], event["endpoint_cache"]) == (False, False, False)
        assert event["reason"] == "fast_path: off"
    finally:
        await backend.close()


async def test_an_awscrt_signing_error_is_a_tierd_error(
    moto_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = S3Backend(moto_server.new_tier())
    try:
        await round_trip(backend, "learn.bin", 100)  # the bucket's route is known from here on

        def refuse(*_: Any) -> Any:
            raise AwsCrtError(code=34, name="AWS_ERROR_INVALID_ARGUMENT", message="An invalid argument")

        monkeypatch.setattr(crt_auth, "aws_sign_request", refuse)  # what ``fast.lean.sign`` calls
        with pytest.raises(PermanentBackendError, match="AWS_ERROR_INVALID_ARGUMENT") as caught:
            await backend.stat("learn.bin")
        assert isinstance(caught.value.__cause__, AwsCrtError)
    finally:
        await backend.close()
