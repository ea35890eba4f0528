"""A RangeReader that serves an object's first bytes from memory and fetches the rest.

Every object store opens a reader with one GET of the object's first bytes (a small object
whole), so a small object costs one request; ``HeadFirstReader`` serves what falls within
those bytes and hands the remainder of a read to the store's ``fetch`` (one ranged GET).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["HeadFirstReader"]


class HeadFirstReader(ABC):
    """A RangeReader of ``size`` bytes whose first ones, ``head``, came with the GET that opened it."""

    def __init__(self, size: int, head: bytes | bytearray = b"") -> None:
        self.size = size
        self._head = memoryview(head)

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` from ``offset``: from the first bytes, then one ``fetch``; short only at the end.

        Raises what the store's ``fetch`` raises.
        """
        want = min(len(buf), self.size - offset)
        if want <= 0:
            return 0
        got = max(0, min(want, len(self._head) - offset))
        if got:
            buf[:got] = self._head[offset : offset + got]
        if got < want:
            await self.fetch(offset + got, buf[got:want])
        return want

    @abstractmethod
    async def fetch(self, offset: int, view: memoryview) -> None:
        """Fill all of ``view`` with the object's bytes from ``offset`` (one ranged GET)."""

    async def close(self) -> None:
        """Forget the first bytes (connections belong to the store's session)."""
        self._head = memoryview(b"")
