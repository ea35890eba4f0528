"""Optional packages hidden from the libraries that would load them for features tierd never uses.

``hidden(*packages)`` makes an import of those packages fail, as if they were not installed,
while its block runs, and only then: a library that imports them optionally at its own
import (or its first use) goes without, and anything that imports them later gets them as
ever. Nothing is hidden once one of them is loaded already. Each costs every daemon resident
memory for nothing (``tierd.logs``: rich and pygments; ``tierd.api.app``: pydantic.v1).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["hidden", "hidden_for_good"]


class _Hidden(importlib.abc.MetaPathFinder):
    """Answers an import of ``packages`` (or of a module in them) as if it were not installed."""

    def __init__(self, packages: Sequence[str]) -> None:
        self.packages = tuple(packages)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if any(fullname == p or fullname.startswith(f"{p}.") for p in self.packages):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by tierd)", name=fullname)
        return None


@contextmanager
def hidden(*packages: str) -> Iterator[None]:
    """While the block runs, importing any of ``packages`` fails as if it were not installed."""
    if any(p in sys.modules for p in packages):
        yield
        return
    finder = _Hidden(packages)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


#: The finder ``hidden_for_good`` installed, once.
_FOR_GOOD = _Hidden(())


def hidden_for_good(*modules: str) -> None:
    """From now on, importing any of ``modules`` fails as if it were not installed.

    For a library's optional part that loads more for a feature tierd never uses, whenever
    the library itself is imported (``tierd.logs``: httpx's command line). A module loaded
    already stays loaded.
    """
    _FOR_GOOD.packages = tuple(dict.fromkeys((*_FOR_GOOD.packages, *modules)))
    if _FOR_GOOD not in sys.meta_path:
        sys.meta_path.insert(0, _FOR_GOOD)
