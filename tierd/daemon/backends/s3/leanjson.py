"""JSON parsed with only some members of one nested object kept, the others freed as they are read.

``members_kept(text, path, keep)``: the whole document, except that the object(s) at ``path``
keep only the members named in ``keep``. Every other value is parsed whole by ``json``'s own
(C) decoder; only the objects and arrays along ``path`` are walked here, member by member, so
a member left out is freed before the next one is parsed. botocore's ``endpoints.json`` (1.2
MB: every AWS service in every partition, of which an S3 tier's session keeps four) parsed
whole and trimmed after left ~4 MB of a daemon's resident memory in half-empty arenas, and
its parse peaked at 5.3 MB of Python objects; read this way, 0.1 MB and 2.5 MB (the text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

__all__ = ["ANY_ITEM", "members_kept"]

#: In a path: every item of an array.
ANY_ITEM = "*"

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_LEFT_OUT = object()
#: Reads the value starting at a position: (the value, or _LEFT_OUT, and where it ends).
_Reader = Callable[[int], tuple[Any, int]]


def members_kept(text: str, path: Sequence[str], keep: Collection[str]) -> Any:
    """The JSON ``text`` with the object(s) at ``path`` holding only the members in ``keep``.

    ``path`` names object members, or ``ANY_ITEM`` for each item of an array. Raises
    ValueError for text that is not JSON, or whose values along ``path`` are not an object
    (or, for ``ANY_ITEM``, an array).
    """
    walk = _Walk(text)
    try:
        value, end = walk.along(0, tuple(path), keep)
        if walk.skip(end) != len(text):
            raise ValueError(f"extra data at {end}")
    except (ValueError, IndexError) as exc:  # IndexError: the text ended inside a value
        raise ValueError(f"not JSON of the layout {'/'.join(path)}: {exc}") from None
    return value


class _Walk:
    """A walk over one JSON text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def skip(self, pos: int) -> int:
        """Where the white space at ``pos`` ends."""
        match = _SPACE.match(self.text, pos)
        assert match is not None  # it matches the empty string
        return match.end()

    def expect(self, pos: int, char: str) -> int:
        """Where ``char`` (after any white space at ``pos``) ends; ValueError if it is not there."""
        pos = self.skip(pos)
        if self.text[pos : pos + 1] != char:
            raise ValueError(f"expected {char!r} at {pos}")
        return pos + 1

    def whole(self, pos: int) -> tuple[Any, int]:
        """The value at ``pos``, by ``json``'s decoder."""
        return _DECODER.raw_decode(self.text, self.skip(pos))

    def along(self, pos: int, path: tuple[str, ...], keep: Collection[str]) -> tuple[Any, int]:
        """The value at ``pos``, ``path`` leading to the object whose members are kept."""
        if not path:
            return self.object(pos, lambda key, at: self.whole(at) if key in keep else self.dropped(at))
        step, rest = path[0], path[1:]
        if step == ANY_ITEM:
            return self.array(pos, lambda at: self.along(at, rest, keep))
        return self.object(pos, lambda key, at: self.along(at, rest, keep) if key == step else self.whole(at))

    def dropped(self, pos: int) -> tuple[Any, int]:
        """Nothing, and the end of the value at ``pos`` (parsed, and freed at once)."""
        return _LEFT_OUT, self.whole(pos)[1]

    def object(self, pos: int, member: Callable[[str, int], tuple[Any, int]]) -> tuple[dict[str, Any], int]:
        """The object at ``pos`` and its end, each member's value read by ``member(key, where)``."""
        result: dict[str, Any] = {}
        pos = self.expect(pos, "{")
        if self.text[self.skip(pos) : self.skip(pos) + 1] == "}":
            return result, self.skip(pos) + 1
        while True:
            key, pos = _DECODER.raw_decode(self.text, self.skip(pos))
            if not isinstance(key, str):
                raise ValueError(f"a member's name is no string at {pos}")
            value, pos = member(key, self.expect(pos, ":"))
            if value is not _LEFT_OUT:
                result[key] = value
            pos = self.skip(pos)
            if self.text[pos : pos + 1] == "}":
                return result, pos + 1
            pos = self.expect(pos, ",")

    def array(self, pos: int, item: _Reader) -> tuple[list[Any], int]:
        """The array at ``pos`` and its end, each item read by ``item(where)``."""
        result: list[Any] = []
        pos = self.expect(pos, "[")
        if self.text[self.skip(pos) : self.skip(pos) + 1] == "]":
            return result, self.skip(pos) + 1
        while True:
            value, pos = item(pos)
            result.append(value)
            pos = self.skip(pos)
            if self.text[pos : pos + 1] == "]":
                return result, pos + 1
            pos = self.expect(pos, ",")
