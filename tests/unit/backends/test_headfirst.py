"""HeadFirstReader: reads within the opening GET's bytes need no request; the rest is one fetch."""

from __future__ import annotations

import os

import pytest

from tierd.daemon.backends.azure.reads import AzureReader
from tierd.daemon.backends.gcs.backend import GcsReader
from tierd.daemon.backends.headfirst import HeadFirstReader
from tierd.daemon.backends.s3.reads import S3Reader

DATA = os.urandom(1000)
HEAD = 300


class Recording(HeadFirstReader):
    """An object held in memory whose ``fetch`` records each (offset, length) asked for."""

    def __init__(self, data: bytes, head: int) -> None:
        super().__init__(len(data), data[:head])
        self.data, self.fetched = data, list[tuple[int, int]]()

    async def fetch(self, offset: int, view: memoryview) -> None:
        self.fetched.append((offset, len(view)))
        view[:] = self.data[offset : offset + len(view)]


@pytest.mark.parametrize(
    ("offset", "length", "fetched"),
    [
        (0, 100, []),  # within the first bytes: no request
        (200, 100, []),  # up to their end exactly
        (250, 100, [(300, 50)]),  # across their end: only the rest is fetched
        (400, 100, [(400, 100)]),  # past them
        (950, 100, [(950, 50)]),  # short at the object's end
        (1000, 10, []),  # at the end: nothing, no request
        (1200, 10, []),  # past the end likewise
    ],
)
async def test_a_read_takes_the_first_bytes_then_fetches_only_the_rest(
    offset: int, length: int, fetched: list[tuple[int, int]]
) -> None:
    reader = Recording(DATA, HEAD)
    buf = bytearray(length)
    got = await reader.read_into(offset, memoryview(buf))
    assert got == max(0, min(length, len(DATA) - offset))
    assert bytes(buf[:got]) == DATA[offset : offset + got]
    assert reader.fetched == fetched


async def test_after_close_every_byte_is_fetched() -> None:
    reader = Recording(DATA, HEAD)
    await reader.close()
    buf = bytearray(10)
    assert await reader.read_into(0, memoryview(buf)) == 10
    assert bytes(buf) == DATA[:10]
    assert reader.fetched == [(0, 10)]


@pytest.mark.parametrize("store_reader", [S3Reader, AzureReader, GcsReader])
def test_every_store_reader_serves_its_first_bytes_the_shared_way(store_reader: type) -> None:
    assert issubclass(store_reader, HeadFirstReader)
    assert "read_into" not in vars(store_reader)
