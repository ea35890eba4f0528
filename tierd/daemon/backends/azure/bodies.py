"""A block's request body: the budget's buffer sent in slices, as aiohttp payload, no copy.

azure-core hands a body it does not know (neither ``bytes`` nor ``str``) to aiohttp as it
is, if it looks like a stream (``read``, ``__iter__`` or ``__aiter__``), and aiohttp sends a
``Payload`` as it is. A ``bytes`` or ``bytearray`` body above 1 MiB would be wrapped by
aiohttp in a ``BytesPayload``, which warns that it may block the loop, and the SDK's Put
Blob copies its body into ``bytes`` first; this payload sends the buffer the block was read
and hashed in, in ``SEND_SLICE`` slices, each write draining before the next. A retry calls
``write_with_length`` again and sends it whole once more. The buffer stays charged to the
budget until the service answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

from tierd.daemon.backends.budget import MIB

__all__ = ["PUT_LIMIT", "SEND_SLICE", "BlockBody"]

SEND_SLICE = 1 * MIB
#: Files up to this size go up in one Put Blob (whose SDK helper sends ``bytes``: aiohttp
#: sends up to 1 MiB of those without its warning); bigger ones as blocks.
PUT_LIMIT = 1 * MIB


class BlockBody(Payload):
    """A filled buffer, sent whole by every ``write_with_length`` call."""

    _autoclose = True  # holds no file or connection

    def __init__(self, view: memoryview) -> None:
        super().__init__(None, content_type="application/octet-stream")
        self._view = view
        self._size = len(view)

    def __len__(self) -> int:
        return len(self._view)

    def __aiter__(self) -> AsyncIterator[bytes]:
        """Never iterated: azure-core only checks that a stream body has it; aiohttp writes it."""
        raise TypeError("a payload: aiohttp writes it")

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """Not text: refused."""
        raise TypeError("binary upload body")

    async def write(self, writer: AbstractStreamWriter) -> None:
        """Send every byte."""
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        """Send the buffer in slices, up to ``content_length`` bytes."""
        end = len(self._view) if content_length is None else min(len(self._view), content_length)
        for start in range(0, end, SEND_SLICE):
            await writer.write(self._view[start : min(start + SEND_SLICE, end)])
