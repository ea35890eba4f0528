"""The GCS tier through the fault proxy, in front of gcp-storage-emulator.

503 and 429 answers, a reset mid-request and a body cut short are transient (retryable)
tierd errors that leave nothing under the final name; a resumable session survives a
refused chunk and the retry sends only the chunks the session lacks; an answer whose
CRC32C is not the one tierd computed fails the write and removes the object.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from tests.conformance.harness import crc, read_back
from tests.fixtures.faultproxy import Fault, FaultProxy, Rule
from tests.fixtures.gcsemulator import TEST_CHUNK, GcsEmulator
from tierd.daemon.backends import BytesReader, MemoryResumeStore, WriteRequest
from tierd.daemon.backends.gcs import GcsBackend
from tierd.daemon.backends.gcs.backend import OPEN_RANGE
from tierd.errors import IntegrityError, NotFound, TransientBackendError

THROTTLED = [Fault.error(503, "backendError"), Fault.error(429, "rateLimitExceeded")]


@pytest.fixture
async def proxied(gcs_emulator: GcsEmulator) -> AsyncIterator[tuple[FaultProxy, GcsBackend]]:
    """A GCS tier whose every request goes through a fault proxy."""
    with FaultProxy(gcs_emulator.endpoint_url) as proxy:
        tier = gcs_emulator.new_tier(endpoint_url=proxy.endpoint_url)
        backend = GcsBackend(tier)
        yield proxy, backend
        await backend.close()


@pytest.mark.parametrize("fault", THROTTLED, ids=lambda f: f.name)
async def test_a_throttled_upload_is_transient_and_leaves_nothing(
    proxied: tuple[FaultProxy, GcsBackend], fault: Fault
) -> None:
    proxy, gcs = proxied
    proxy.set_rules([Rule(fault, method="POST", first=1)])
    data = os.urandom(5000)
    with pytest.raises(TransientBackendError, match=str(fault.status)):
        await gcs.write(WriteRequest("t.bin", BytesReader(data), crc(data)))
    with pytest.raises(NotFound):
        await gcs.stat("t.bin")
    assert (await gcs.write(WriteRequest("t.bin", BytesReader(data), crc(data)))).checksum == crc(data)
    assert [f for _, f in proxy.fired] == [fault.name]


@pytest.mark.parametrize("fault", [*THROTTLED, Fault("reset_request")], ids=lambda f: f.name)
async def test_a_refused_chunk_keeps_the_session_and_the_retry_sends_the_rest(
    proxied: tuple[FaultProxy, GcsBackend], fault: Fault
) -> None:
    proxy, gcs = proxied
    data = os.urandom(3 * TEST_CHUNK + 1234)
    proxy.set_rules([Rule(fault, method="PUT", nth=2)])  # the second chunk
    store = MemoryResumeStore()
    with pytest.raises(TransientBackendError):
        await gcs.write(WriteRequest("big.bin", BytesReader(data), crc(data), resume=store))
    with pytest.raises(NotFound):
        await gcs.stat("big.bin")
    assert [p.part_number for p in store.states["big.bin"].parts] == [1]
    proxy.set_rules([])
    proxy.reset_counts()
    info = await gcs.write(WriteRequest("big.bin", BytesReader(data), crc(data), resume=store))
    assert info.checksum == crc(data)
    # one status query, then chunks 2, 3 and 4: chunk 1 is not sent again
    assert len([r for r in proxy.requests if r.method == "PUT"]) == 4
    assert await read_back(gcs, "big.bin") == data


@pytest.mark.parametrize(
    "fault", [Fault("truncate"), Fault("reset_response"), *THROTTLED], ids=lambda f: f.name
)
async def test_a_read_cut_short_or_throttled_is_transient(
    proxied: tuple[FaultProxy, GcsBackend], fault: Fault
) -> None:
    """At the opening GET (its first ``OPEN_RANGE`` bytes) and at a ranged GET after it."""
    proxy, gcs = proxied
    data = os.urandom(OPEN_RANGE + 200_000)
    await gcs.write(WriteRequest("r.bin", BytesReader(data), crc(data)))
    proxy.set_rules([Rule(fault, method="GET", first=1)])
    with pytest.raises(TransientBackendError):
        await gcs.open_reader("r.bin")
    reader = await gcs.open_reader("r.bin")
    proxy.set_rules([Rule(fault, method="GET", first=1)])
    buf = memoryview(bytearray(len(data)))
    with pytest.raises(TransientBackendError):
        await reader.read_into(0, buf)
    assert await reader.read_into(0, buf) == len(data)
    assert bytes(buf) == data


@pytest.mark.parametrize("size", [5000, 2 * TEST_CHUNK + 99], ids=["multipart", "resumable"])
async def test_an_answer_with_a_wrong_crc32c_fails_the_write_and_leaves_nothing(
    proxied: tuple[FaultProxy, GcsBackend], size: int
) -> None:
    """The service's CRC32C in its answer must be tierd's: else the object goes and the write fails."""
    proxy, gcs = proxied
    proxy.set_rules([Rule(Fault("crc32c"), method="POST" if size == 5000 else "PUT")])
    data = os.urandom(size)
    with pytest.raises(IntegrityError, match="CRC32C AAAAAA=="):
        await gcs.write(WriteRequest("c.bin", BytesReader(data), crc(data)))
    proxy.set_rules([])
    with pytest.raises(NotFound):
        await gcs.stat("c.bin")
    assert "crc32c" in [f for _, f in proxy.fired]


@pytest.mark.parametrize("size", [0, 1000, OPEN_RANGE + 5], ids=["empty", "small", "bigger"])
async def test_a_read_starts_with_the_media_get_no_metadata_get(
    proxied: tuple[FaultProxy, GcsBackend], size: int
) -> None:
    """open_reader's size comes from its first media GET: no JSON metadata GET before the bytes."""
    proxy, gcs = proxied
    data = os.urandom(size)
    await gcs.write(WriteRequest("o.bin", BytesReader(data), crc(data)))
    proxy.reset_counts()
    assert await read_back(gcs, "o.bin") == data
    gets = [r for r in proxy.requests if r.method == "GET"]
    assert [r.query.get("alt") for r in gets] == [["media"]] * (1 if size <= OPEN_RANGE else 2)
