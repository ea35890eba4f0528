"""What the GCS tier relies on and adds, checked against gcp-storage-emulator and real parts.

The service refuses a declared CRC32C the bytes do not have; tierd's own CRC32C is what
it declares (a wrong one fails the write, nothing left); storage class and KMS key go with
every write; a malformed tier names its key; a service account's key becomes a signed JWT
grant at its token URI.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.conformance.harness import crc, listed
from tests.fixtures.faultproxy import FaultProxy
from tests.fixtures.gcsemulator import GcsEmulator
from tierd.config import load_config
from tierd.daemon.backends import ByteBudget, BytesReader, SmallFile, WriteRequest
from tierd.daemon.backends.base import WriteBatch
from tierd.daemon.backends.gcs import GcsBackend, auth, backend, writes
from tierd.daemon.backends.gcs.objects import crc32c, encode_crc32c
from tierd.errors import ConfigError, IntegrityError, NotFound

MIB = 1024 * 1024


async def test_the_emulator_refuses_a_wrong_declared_crc32c(gcs_emulator: GcsEmulator) -> None:
    gcs = GcsBackend(gcs_emulator.new_tier())
    try:
        data = os.urandom(1000)
        resource = {"name": "x.bin", "crc32c": encode_crc32c(crc32c(b"other bytes"))}
        with pytest.raises(IntegrityError, match="CRC32C"):
            await writes.upload_whole(gcs.media, "x.bin", memoryview(data), resource, {})
        assert await listed(gcs) == []
    finally:
        await gcs.close()


async def test_a_small_objects_upload_and_read_go_on_tierds_own_connections(
    gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multipart upload and a media GET are each one request on ``httpwire``, not aiohttp's."""

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a media request went through aiohttp")

    monkeypatch.setattr(aiohttp.ClientSession, "_request", refused)
    gcs = GcsBackend(gcs_emulator.new_tier())
    try:
        data = os.urandom(5000)
        info = await gcs.write(WriteRequest("m.bin", BytesReader(data), crc(data)))
        assert (info.size, info.checksum) == (5000, crc(data))
        whole, opened = bytearray(5000), bytearray(5000)
        assert await gcs.read_whole(["m.bin"], [memoryview(whole)]) == [None]
        reader = await gcs.open_reader("m.bin")
        assert await reader.read_into(0, memoryview(opened)) == 5000
        await reader.close()
        assert bytes(whole) == bytes(opened) == data
    finally:
        await gcs.close()


@pytest.mark.parametrize("size", [1000, 12 * MIB], ids=["multipart", "resumable"])
async def test_a_wrong_crc32c_of_tierds_fails_the_write_and_leaves_nothing(
    gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """tierd's CRC32C is the one declared and checked: off by one, the write must fail."""
    real = crc32c
    monkeypatch.setattr(writes, "crc32c", lambda view, previous=0: real(view, previous) ^ 1)
    gcs = GcsBackend(gcs_emulator.new_tier())
    try:
        data = os.urandom(size)
        with pytest.raises(IntegrityError, match="CRC32C"):
            await gcs.write(WriteRequest("w.bin", BytesReader(data), crc(data)))
        with pytest.raises(NotFound):
            await gcs.stat("w.bin")
    finally:
        await gcs.close()


@pytest.mark.parametrize("size", [1000, 12 * MIB], ids=["multipart", "resumable"])
async def test_storage_class_and_kms_key_go_with_every_write(gcs_emulator: GcsEmulator, size: int) -> None:
    """Seen on the wire (a proxy in between): the multipart upload and the resumable session's start."""
    key = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
    with FaultProxy(gcs_emulator.endpoint_url) as proxy:
        tier = gcs_emulator.new_tier(
            storage_class="NEARLINE", kms_key_name=key, endpoint_url=proxy.endpoint_url
        )
        gcs = GcsBackend(tier)
        try:
            data = os.urandom(size)
            info = await gcs.write(WriteRequest("c.bin", BytesReader(data), crc(data)))
            assert info.verified_by == "store"
            [stored] = gcs_emulator.objects(gcs.bucket)
            assert stored["storageClass"] == "NEARLINE"
            uploads = [r for r in proxy.requests if r.method == "POST" and "/upload/" in r.path]
            assert [r.query["kmsKeyName"] for r in uploads] == [[key]]
        finally:
            await gcs.close()


async def test_verify_needs_no_byte_and_catches_a_changed_record(
    gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    gcs = GcsBackend(gcs_emulator.new_tier())
    try:
        data = os.urandom(3000)
        await gcs.write(WriteRequest("v.bin", BytesReader(data), crc(data)))
        reads: list[int] = []
        original = backend.GcsReader.read_into

        async def counting(self: backend.GcsReader, offset: int, buf: memoryview) -> int:
            reads.append(offset)
            return await original(self, offset, buf)

        # monkeypatch removes it afterwards: GcsReader inherits read_into, and assigning the
        # original back would leave a copy in its own namespace (test_headfirst checks it has none)
        monkeypatch.setattr(backend.GcsReader, "read_into", counting)
        assert (await gcs.verify("v.bin", crc(data))).verified_by == "store"
        assert reads == []
        # Someone rewrote the metadata's CRC32C: the CRC64NVME beside it is no longer vouched for.
        gcs_emulator.call(
            "PATCH",
            f"/storage/v1/b/{gcs.bucket}/o/v.bin",
            {"metadata": {"crc64nvme": crc(data), "crc32c": "AAAAAA=="}},
        )
        with pytest.raises(IntegrityError, match="declared"):
            await gcs.verify("v.bin", crc(data))
    finally:
        await gcs.close()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("storage_class", "GLACIER", "tiers.1.gcs.storage_class"),
        ("kms_key_name", "my-key", "tiers.1.gcs.kms_key_name"),
        ("chunk_size", 1000000, "tiers.1.gcs.chunk_size"),
        ("bucket", "A", "tiers.1.gcs.bucket"),
        ("free_space", {"above": "10%"}, "free_space"),
    ],
)
def test_a_malformed_gcs_tier_names_its_key(tmp_path: Path, field: str, value: Any, words: str) -> None:
    tier = {"name": "gcs", "kind": "gcs", "bucket": "ckpt", field: value}
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": [{"name": "nvme", "kind": "posix", "path": "ckpt"}, tier]}))
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_config(path)


async def test_a_service_account_key_becomes_a_signed_jwt_grant(tmp_path: Path) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    key_file = tmp_path / "sa.json"
    key_file.write_text(
        json.dumps(
            {
                "type": "service_account",
                "client_email": "t@p.iam",
                "private_key": pem,
                "token_uri": "https://t/token",
            }
        )
    )
    grants: list[dict[str, str]] = []

    def token_endpoint(request: httpx.Request) -> httpx.Response:
        grants.append(dict(httpx.QueryParams(request.content.decode())))
        return httpx.Response(200, json={"access_token": "tok-1", "expires_in": 3600})

    credentials = auth.credentials_for(key_file, emulator=False)
    async with httpx.AsyncClient(transport=httpx.MockTransport(token_endpoint)) as http:
        assert await credentials.headers(http) == {"Authorization": "Bearer tok-1"}
        assert await credentials.headers(http) == {"Authorization": "Bearer tok-1"}  # kept, not asked again
    [grant] = grants
    assert grant["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    header, claims, signature = grant["assertion"].split(".")
    assert json.loads(pad(claims))["iss"] == "t@p.iam"
    assert json.loads(pad(claims))["aud"] == "https://t/token"
    private.public_key().verify(
        pad(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
    )


def pad(part: str) -> bytes:
    """A base64url JWT part decoded."""
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_an_emulator_takes_no_credentials_and_a_bad_key_file_is_named(tmp_path: Path) -> None:
    assert isinstance(auth.credentials_for(None, emulator=True), auth.Anonymous)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "service_account", "client_email": "x"}))
    with pytest.raises(Exception, match="private_key is missing"):
        auth.credentials_for(bad, emulator=True)


async def test_a_group_is_written_while_its_caller_holds_the_whole_budget(gcs_emulator: GcsEmulator) -> None:
    """A group's files are held within the budget by the caller (16 lanes of groups can hold
    all of it): their uploads must not wait for more of it (they waited forever)."""
    budget = ByteBudget(64 * 1024)
    gcs = GcsBackend(gcs_emulator.new_tier(), budget=budget)
    files = [
        SmallFile(f"g/{i}.bin", data, crc(data)) for i, data in enumerate(os.urandom(3000) for _ in range(3))
    ]
    try:
        async with budget.buffer(budget.limit):
            written = await asyncio.wait_for(WriteBatch(gcs).write_whole(files), timeout=120)
        assert [getattr(info, "checksum", info) for info in written] == [f.checksum for f in files]
    finally:
        await gcs.close()
