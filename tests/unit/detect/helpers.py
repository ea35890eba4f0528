"""Small helpers shared by the detection tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tierd.config import WatchConfig
from tierd.daemon.detect.scan import Found, RootSpec, scan_root


class NothingKnown:
    """A Known that has recorded nothing."""

    def has_path(self, relpath: str) -> bool:
        return False

    def has_step(self, run: str, step: int) -> bool:
        return False


def make_spec(root: Path, tier0: Path, fmt: str = "auto", **kw: object) -> RootSpec:
    """A RootSpec for ``root`` inside ``tier0`` (run ``demo`` unless run_pattern is given)."""
    if "run_pattern" not in kw:
        kw.setdefault("run", "demo")
    return RootSpec.of(WatchConfig(path=root, format=fmt, **kw), tier0)


def complete(spec: RootSpec) -> list[Found]:
    """The complete candidates a full scan finds."""
    return [f for f in scan_root(spec, NothingKnown()) if f.verdict.complete]


#: A directory name near NAME_MAX: 20 of them nested make a path past PATH_MAX (4096 bytes).
DEEP_NAME = "d" * 250
DEEP_LEVELS = 20


def _open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


@contextmanager
def deep_chain(top: Path) -> Iterator[Path]:
    """``top/DEEP_NAME/...`` nested deeper than PATH_MAX with a file at its end; removed at exit.

    Made and removed through descriptors (``mkdir`` and ``open`` with ``dir_fd``,
    ``shutil.rmtree`` with ``dir_fd``): the kernel refuses a whole path that long.
    """
    fd = _open_dir(top)
    try:
        for _ in range(DEEP_LEVELS):
            os.mkdir(DEEP_NAME, dir_fd=fd)
            child = _open_dir(DEEP_NAME, fd)
            os.close(fd)
            fd = child
        end = os.open("deep.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        os.write(end, b"at the end of a path longer than PATH_MAX")
        os.close(end)
    finally:
        os.close(fd)
    try:
        yield top / DEEP_NAME
    finally:
        fd = _open_dir(top)
        try:
            shutil.rmtree(DEEP_NAME, dir_fd=fd)
        finally:
            os.close(fd)
