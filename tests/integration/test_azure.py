"""The azure tier against a real Azurite: the checks the service makes, resume after kill -9, access tiers.

These show that what tierd relies on is real: Azurite refuses a block or a blob whose CRC64
is wrong (so a block that passed was received intact), a daemon killed mid-upload resends
only the blocks the service does not hold, a blob in the Archive tier is refused at once
with the reason, and ``verify`` compares the checksum recorded with the blob without
reading a byte of it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from awscrt import checksums
from azure.core.exceptions import HttpResponseError

from tests.conformance.harness import CountingReader, crc, read_back
from tests.fixtures.azurite import AzuriteServer
from tierd.daemon.backends import ByteBudget, BytesReader, SmallFile, WriteRequest
from tierd.daemon.backends.azure import AzureBackend
from tierd.daemon.backends.azure.blocks import azure_crc64
from tierd.daemon.backends.azure.errors import translate
from tierd.daemon.backends.azure.reads import READBACK_RANGE
from tierd.daemon.backends.base import WriteBatch
from tierd.errors import IntegrityError, ObjectArchived

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def make(azurite_server: AzuriteServer) -> AsyncIterator[Callable[..., AzureBackend]]:
    """``make(**tier_fields)``: a fresh AzureBackend; all closed at the end."""
    made: list[AzureBackend] = []

    def build(**fields: Any) -> AzureBackend:
        made.append(AzureBackend(azurite_server.new_tier(**fields)))
        return made[-1]

    yield build
    for backend in made:
        await backend.close()


def test_azurite_refuses_a_block_and_a_blob_whose_crc64_is_wrong(azurite_server: AzuriteServer) -> None:
    data = os.urandom(100_000)
    right = int(checksums.crc64nvme(data))
    wrong = azure_crc64(right ^ 1)
    with azurite_server.container(azurite_server.create_container()) as container:
        blob = container.get_blob_client("x.bin")
        blob.stage_block("b0", data, headers={"x-ms-content-crc64": azure_crc64(right)})  # taken
        refusals = []
        with pytest.raises(HttpResponseError) as refused:
            blob.stage_block("b1", data, headers={"x-ms-content-crc64": wrong})
        refusals.append(refused.value)
        with pytest.raises(HttpResponseError) as refused:
            blob.upload_blob(data, overwrite=True, headers={"x-ms-content-crc64": wrong})
        refusals.append(refused.value)
        for refusal in refusals:
            assert refusal.status_code == 400
            assert isinstance(translate(refusal, "write", "x.bin"), IntegrityError)
        assert [block.id for block in blob.get_block_list("uncommitted")[1]] == ["b0"]
        # Azure's CRC64 is CRC64NVME: the same value, little-endian where tierd's text is big-endian
        assert base64.b64decode(azure_crc64(right)) == base64.b64decode(crc(data))[::-1]


CHILD = """
import asyncio, os, sys
from tests.fixtures.azurite import ACCOUNT_KEY
from tierd.config import AzureTier
from tierd.daemon.backends import WriteRequest
from tierd.daemon.backends.azure import AzureBackend

class StallingReader:
    def __init__(self, data, stall_at):
        self.data, self.size, self.stall_at = data, len(data), stall_at
    async def read_into(self, offset, buf):
        if offset >= self.stall_at:
            await asyncio.Event().wait()  # killed here
        buf[:] = self.data[offset : offset + len(buf)]
        return len(buf)
    async def close(self):
        pass

async def main():
    tier = AzureTier.model_validate_json(sys.argv[1])
    data = open(sys.argv[2], "rb").read()
    backend = AzureBackend(tier)
    await backend.write(WriteRequest("big/model.pt", StallingReader(data, int(sys.argv[3])), sys.argv[4]))

asyncio.run(main())
"""


def _staged(azurite_server: AzuriteServer, container: str, name: str) -> int:
    with azurite_server.container(container) as client:
        try:
            return len(client.get_blob_client(name).get_block_list("uncommitted")[1])
        except HttpResponseError:
            return 0


async def test_kill_9_mid_upload_resumes_from_the_staged_blocks(
    azurite_server: AzuriteServer, tmp_path: Path
) -> None:
    """A writer killed after 3 of 7 blocks: the next write sends the other 4 only, and nothing was visible."""
    tier = azurite_server.new_tier(block_size=MIB, concurrency=1)
    data = os.urandom(6 * MIB + 1234)
    source = tmp_path / "model.pt"
    source.write_bytes(data)
    assert tier.account_key is not None
    fields = json.dumps(tier.model_dump(mode="json") | {"account_key": tier.account_key.get_secret_value()})
    argv = [sys.executable, "-c", textwrap.dedent(CHILD), fields, str(source), str(3 * MIB), crc(data)]
    child = subprocess.Popen(argv, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        while _staged(azurite_server, tier.container, "big/model.pt") < 3:
            assert child.poll() is None, "the writer ended before it was killed"
            assert time.monotonic() < deadline, "the writer never staged 3 blocks"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    backend = AzureBackend(tier)
    try:
        assert [info async for info in backend.list()] == []  # nothing visible under the name
        again = CountingReader(data)
        info = await backend.write(WriteRequest("big/model.pt", again, crc(data)))
        assert again.bytes_read == len(data) - 3 * MIB  # the 3 staged blocks were not read nor sent
        assert info.checksum == crc(data)
        assert await read_back(backend, "big/model.pt") == data
        assert await backend.hash("big/model.pt") == crc(data)
    finally:
        await backend.close()


async def test_an_archived_blob_is_refused_at_once_with_the_reason(make: Callable[..., AzureBackend]) -> None:
    backend = make(storage_class="Archive")
    data = os.urandom(2000)
    await backend.write(WriteRequest("cold/x.bin", BytesReader(data), crc(data)))
    with pytest.raises(ObjectArchived, match="Archive access tier"):
        await backend.open_reader("cold/x.bin")
    verified = await backend.verify("cold/x.bin", crc(data))  # from the recorded checksum: no read
    assert verified.verified_by == "store"


@pytest.mark.parametrize("size", [2000, 3 * MIB + 5], ids=["put-blob", "blocks"])
async def test_every_write_carries_the_access_tier(
    make: Callable[..., AzureBackend], azurite_server: AzuriteServer, size: int
) -> None:
    backend = make(storage_class="Cool", block_size=MIB)
    data = os.urandom(size)
    await backend.write(WriteRequest("t/x.bin", BytesReader(data), crc(data)))
    with azurite_server.container(backend.tier.container) as client:
        properties = client.get_blob_client("t/x.bin").get_blob_properties()
    assert properties.blob_tier == "Cool"
    assert properties.metadata["crc64nvme"] == crc(data)


async def test_verify_compares_the_recorded_checksum_without_reading(
    make: Callable[..., AzureBackend], azurite_server: AzuriteServer
) -> None:
    backend = make()
    data = os.urandom(3000)
    await backend.write(WriteRequest("v/x.bin", BytesReader(data), crc(data)))
    assert (await backend.verify("v/x.bin", crc(data))).verified_by == "store"
    with azurite_server.container(backend.tier.container) as client:
        client.get_blob_client("v/x.bin").set_blob_metadata({"crc64nvme": crc(b"other")})
    with pytest.raises(IntegrityError, match="recorded"):
        await backend.verify("v/x.bin", crc(data))  # the bytes are intact: only the record differs
    assert await backend.hash("v/x.bin") == crc(data)


def _container_sas(container: str) -> str:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from tests.fixtures.azurite import ACCOUNT, ACCOUNT_KEY

    permission = ContainerSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True)
    expiry = datetime.now(UTC) + timedelta(hours=1)
    return generate_container_sas(ACCOUNT, container, ACCOUNT_KEY, permission=permission, expiry=expiry)


@pytest.mark.parametrize("credential", ["account_key", "sas_token"])
async def test_the_data_path_signs_and_quotes_as_the_service_checks(
    make: Callable[..., AzureBackend], azurite_server: AzuriteServer, credential: str
) -> None:
    """Put Blob, Put Block, ranged and whole GETs go on tierd's own session (``azure.rest``):
    Azurite checks their Shared Key signature or SAS, over names that need quoting."""
    container = azurite_server.create_container()
    fields: dict[str, Any] = {"container": container, "block_size": MIB}
    if credential == "sas_token":
        fields |= {"account_key": None, "sas_token": _container_sas(container)}
    backend = make(**fields)
    files = {"a dir/ü+x%20;=&.bin": os.urandom(3000), "big/m odel#1.pt": os.urandom(2 * MIB + 7)}
    for relpath, data in files.items():
        info = await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))
        assert (info.checksum, info.verified_by) == (crc(data), "store")
        assert await read_back(backend, relpath) == data
        assert await backend.hash(relpath) == crc(data)
    views = [memoryview(bytearray(len(data))) for data in files.values()]
    assert list(await backend.read_whole(list(files), views)) == [None, None]
    assert [bytes(view) for view in views] == list(files.values())
    with azurite_server.container(container) as client:
        stored = {name: client.download_blob(name).readall() for name in client.list_blob_names()}
    assert stored == files


async def test_a_group_is_written_while_its_caller_holds_the_whole_budget(
    azurite_server: AzuriteServer,
) -> None:
    """A group's files are held within the budget by the caller (16 lanes of groups can hold
    all of it): their Put Blobs must not wait for more of it (they waited forever)."""
    budget = ByteBudget(64 * 1024)
    backend = AzureBackend(azurite_server.new_tier(), budget=budget)
    files = [
        SmallFile(f"g/{i}.bin", data, crc(data)) for i, data in enumerate(os.urandom(3000) for _ in range(3))
    ]
    try:
        async with budget.buffer(budget.limit):
            written = await asyncio.wait_for(WriteBatch(backend).write_whole(files), timeout=120)
        assert [getattr(info, "checksum", info) for info in written] == [f.checksum for f in files]
    finally:
        await backend.close()


async def test_blocks_and_read_back_ranges_reuse_the_budgets_buffers(azurite_server: AzuriteServer) -> None:
    """A fresh 16 MiB bytearray per block left freed heap behind it (the upload's peak RSS was
    13 MB over the download's); blocks and read-back ranges now reuse the budget's buffers."""
    budget = ByteBudget(16 * 1024 * 1024)
    backend = AzureBackend(azurite_server.new_tier(), budget=budget)  # 5 MiB blocks
    data = os.urandom(3 * 5 * 1024 * 1024 + 1000)

    def kept() -> list[int]:
        return [len(buffer) for buffers in budget._idle.values() for buffer in buffers]

    try:
        await backend.write(WriteRequest("big.bin", BytesReader(data), crc(data)))
        assert 5 * 1024 * 1024 in kept()  # a block's buffer, kept for the next one
        assert await backend.hash("big.bin") == crc(data)
        assert READBACK_RANGE in kept()
        assert budget.idle_bytes <= budget.limit
    finally:
        await backend.close()
