"""What a peer's upload and removal answer."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["PeerFileOut", "PeerRemovedOut"]


class PeerFileOut(BaseModel):
    """A file held for another node, verified against the CRC64NVME its sender took at first sight."""

    node: str
    checkpoint_id: int
    relpath: str
    size: int
    checksum: str


class PeerRemovedOut(BaseModel):
    """How many held files a removal took away (0: nothing was held there)."""

    removed: int
