"""Multipart uploads in progress: their state, kept so a restarted daemon resumes them.

``Backend.write`` is given a ``ResumeStore`` (``base``) with each big file: a backend with
multipart uploads records there the upload it begins (``UploadState``) and each part the
store acknowledged (``PartState``), and a later write of the same file picks the upload up
where it stopped. The pipeline keeps them in the catalog (``pipeline.resume``);
``MemoryResumeStore`` keeps them in a dict, for tests and one-shot copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["MemoryResumeStore", "PartState", "UploadState"]


@dataclass(frozen=True)
class PartState:
    """A multipart part the store acknowledged."""

    part_number: int
    size: int
    etag: str
    checksum: str  # CRC64NVME of the part, base64


@dataclass(frozen=True)
class UploadState:
    """A multipart upload in progress, persisted so a restart can resume it."""

    upload_id: str
    key: str
    part_size: int
    size: int
    parts: tuple[PartState, ...] = ()


@dataclass
class MemoryResumeStore:
    """A ResumeStore in a dict: for tests and for one-shot copies."""

    states: dict[str, UploadState] = field(default_factory=dict)

    async def load(self, relpath: str) -> UploadState | None:
        """The recorded state, or None."""
        return self.states.get(relpath)

    async def begin(self, relpath: str, state: UploadState) -> None:
        """Record a new upload."""
        self.states[relpath] = state

    async def part_done(self, relpath: str, part: PartState) -> None:
        """Record a finished part (a re-upload of the same number replaces it)."""
        state = self.states[relpath]
        kept = tuple(p for p in state.parts if p.part_number != part.part_number)
        self.states[relpath] = replace(state, parts=(*kept, part))

    async def clear(self, relpath: str) -> None:
        """Forget the upload."""
        self.states.pop(relpath, None)
