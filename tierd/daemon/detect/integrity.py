"""Structural checks that a file was written to its end, without trusting its contents.

* ``torch.save`` writes a zip archive whose end-of-central-directory record is the very
  last thing written; a file still being written (or copied into place) lacks it.
* safetensors files start with a header length and a JSON header naming every tensor's
  byte range; a complete file is exactly as long as the header says.
* Pickled metadata (DCP's ``.metadata``, the ``data.pkl`` inside a ``torch.save`` zip)
  is read by :class:`StubUnpickler`, which never imports or calls anything: every
  global becomes an inert stub, so a crafted file cannot run code in the daemon.

Every file is opened by ``nofollow`` from the tree it lies in (a ``beneath.Root``, or an
``Opener`` that keeps its directory open for the next file): never through a symlink, never a
FIFO, never by a whole path below the tree's top.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from tierd.daemon.beneath import Root
from tierd.daemon.detect.detector import FileStat
from tierd.daemon.nofollow import Opener, open_regular

__all__ = [
    "MAX_PICKLE_BYTES",
    "Source",
    "first_unwritten",
    "Stub",
    "StubUnpickler",
    "safetensors_complete",
    "stub_load",
    "torch_pickle",
    "weights_complete",
    "zip_complete",
]

MAX_PICKLE_BYTES = 256 * 1024 * 1024
_EOCD = struct.Struct("<4sHHHHIIH")
_ZIP64_LOCATOR = struct.Struct("<4sIQI")
_ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")
ZIP_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


#: Where a file is opened from: a tree's top (a ``Root`` or a trusted directory), or an ``Opener``.
Source = Path | Root | Opener


def _open(path: Path, source: Source) -> int:
    """A descriptor reading the regular file ``path`` (``nofollow``'s rules); raises OSError."""
    return source.open(path) if isinstance(source, Opener) else open_regular(path, source)


def _read_tail(fd: int, size: int, length: int) -> bytes:
    start = max(size - length, 0)
    return os.pread(fd, size - start, start)


def zip_complete(path: Path, source: Source) -> bool | None:
    """Whether the zip at ``path`` ends with a consistent end record.

    True when it does, False for a zip that does not (yet), None when the file is not
    a zip at all (e.g. a legacy ``torch.save``).
    """
    try:
        fd = _open(path, source)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 4, 0)
        if head != b"PK\x03\x04":
            return None if size >= 4 else False
        tail = _read_tail(fd, size, _EOCD.size + _ZIP64_LOCATOR.size)
        return _tail_consistent(fd, size, tail)
    finally:
        os.close(fd)


def _tail_consistent(fd: int, size: int, tail: bytes) -> bool:
    if len(tail) < _EOCD.size:
        return False
    sig, _, _, _, _, cd_size, cd_offset, comment = _EOCD.unpack(tail[-_EOCD.size :])
    if sig != b"PK\x05\x06" or comment != 0:
        return False
    eocd_at = size - _EOCD.size
    if len(tail) >= _EOCD.size + _ZIP64_LOCATOR.size:
        loc = _ZIP64_LOCATOR.unpack(tail[: _ZIP64_LOCATOR.size])
        if loc[0] == b"PK\x06\x07":
            record = os.pread(fd, _ZIP64_EOCD.size, loc[2])
            if len(record) != _ZIP64_EOCD.size:
                return False
            fields = _ZIP64_EOCD.unpack(record)
            return bool(fields[0] == b"PK\x06\x06" and fields[9] + fields[8] == loc[2])
    return bool(cd_offset + cd_size == eocd_at)


def safetensors_complete(path: Path, source: Source) -> bool:
    """True if the safetensors file at ``path`` is exactly as long as its header says."""
    try:
        with os.fdopen(_open(path, source), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(8)
            if len(raw) != 8:
                return False
            (header_len,) = struct.unpack("<Q", raw)
            if header_len > min(size, 100 * 1024 * 1024):
                return False
            header = json.loads(f.read(header_len))
    except (OSError, ValueError):
        return False
    if not isinstance(header, dict):
        return False
    end = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        offsets = info.get("data_offsets")
        if isinstance(offsets, list) and len(offsets) == 2 and isinstance(offsets[1], int):
            end = max(end, offsets[1])
    return bool(size == 8 + header_len + end)


def weights_complete(path: Path, source: Source) -> bool:
    """Whether a weights file is written to its end, where its format lets us tell."""
    name = path.name
    if name.endswith(".safetensors"):
        return safetensors_complete(path, source)
    if name.endswith(ZIP_SUFFIXES):
        return zip_complete(path, source) is not False
    return True


def first_unwritten(files: Iterable[FileStat], root: Path | Root) -> str | None:
    """The reason the first weights file (below ``root``) that is not written to its end is not, or None.

    Files of one directory share its descriptor (``Opener``).
    """
    with Opener(root) as opener:
        for f in files:
            if not weights_complete(f.path, opener):
                return f"{f.path.name} is not written to its end yet"
    return None


class Stub:
    """An inert stand-in for any object a pickle names; it records what it was given."""

    module: ClassVar[str] = ""
    qualname: ClassVar[str] = ""

    args: tuple[Any, ...]
    state: Any
    items: dict[Any, Any]
    list: list[Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        """Record the arguments (``__new__``, not ``__init__``: pickle's NEWOBJ calls only this)."""
        self = object.__new__(cls)
        self.args, self.state, self.items, self.list = args, None, {}, []
        return self

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items[key] = value

    def append(self, value: Any) -> None:
        """Collect an APPEND."""
        self.list.append(value)

    def extend(self, values: Any) -> None:
        """Collect an APPENDS."""
        self.list.extend(values)

    def field(self, name: str) -> Any:
        """An attribute set by the pickle's BUILD (dict state, or (dict, slots) state)."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:
            merged: dict[Any, Any] = {}
            for part in state:
                if isinstance(part, dict):
                    merged.update(part)
            state = merged
        return state.get(name) if isinstance(state, dict) else None


class StubUnpickler(pickle.Unpickler):
    """Unpickles structure only: globals resolve to :class:`Stub` subclasses, nothing runs."""

    _cache: ClassVar[dict[tuple[str, str], type[Stub]]] = {}

    def find_class(self, module: str, name: str) -> Any:
        """A stub class named after ``module.name`` (never the real object)."""
        key = (module, name)
        cls = self._cache.get(key)
        if cls is None:
            cls = type(name, (Stub,), {"module": module, "qualname": name})
            self._cache[key] = cls
        return cls

    def persistent_load(self, pid: Any) -> Any:
        """Tensor storages inside ``torch.save`` archives become stubs too."""
        return Stub(pid)


def stub_load(data: bytes) -> Any:
    """Unpickle ``data`` with :class:`StubUnpickler`; raises ValueError when it is not a pickle."""
    try:
        return StubUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # a malformed pickle can raise nearly anything
        raise ValueError(f"not a readable pickle: {exc.__class__.__name__}: {exc}") from None


def torch_pickle(path: Path, source: Source) -> Any:
    """The top-level object of a zip ``torch.save`` file, with tensors as stubs.

    Raises ValueError when the file is not a complete zip archive with a ``data.pkl``.
    """
    try:
        with os.fdopen(_open(path, source), "rb") as raw, zipfile.ZipFile(raw) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not names:
                raise ValueError(f"{path.name}: no data.pkl in the archive")
            info = archive.getinfo(names[0])
            if info.file_size > MAX_PICKLE_BYTES:
                raise ValueError(f"{path.name}: data.pkl is too large to inspect")
            data = archive.read(info)
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise ValueError(f"{path.name}: not a readable torch.save archive: {exc}") from None
    return stub_load(data)
