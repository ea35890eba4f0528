"""The config's building blocks: a strict block, and the values written with a unit.

A duration (``90m``, ``36h``, ``7d`` or seconds) and an amount of free space (``15%`` of a file
system, or a size such as ``200GB``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import (
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    ValidationError,
)

__all__ = ["Duration", "Space", "SpaceAmount", "Strict", "parse_duration", "parse_space"]


class Strict(BaseModel):
    """A config block: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw]?)$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION_HELP = "must be a duration such as 30s, 90m, 36h, 7d, 2w or a number of seconds"


def parse_duration(value: object) -> float:
    """Seconds in ``value``: a number of seconds, or ``"90m"``, ``"36h"``, ``"7d"``, ``"2w"``.

    Raises ValueError (which the config reports under the key) for anything else or a negative.
    """
    if isinstance(value, bool):
        raise ValueError(_DURATION_HELP)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value.strip().lower())):
        seconds = float(match[1]) * _UNIT_SECONDS[match[2]]
    else:
        raise ValueError(_DURATION_HELP)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{_DURATION_HELP}, not negative")
    return seconds


#: A length of time in seconds, written as a number or with a unit (``s m h d w``).
Duration = Annotated[float, BeforeValidator(parse_duration)]


@dataclass(frozen=True)
class SpaceAmount:
    """An amount of free space: a percent of a file system's size, or a number of bytes."""

    value: float
    percent: bool

    def bytes_of(self, total_bytes: int) -> int:
        """The amount in bytes on a file system of ``total_bytes``."""
        if self.percent:
            return math.ceil(total_bytes * self.value / 100)
        return int(self.value)

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{int(self.value)} bytes"


_BYTE_SIZE: TypeAdapter[ByteSize] = TypeAdapter(ByteSize)
_SPACE_HELP = 'must be a percent of the file system ("15%") or a size ("200GB", "1TiB", bytes)'


def parse_space(value: object) -> SpaceAmount:
    """``"15%"`` as a percent; ``"200GB"``, ``"1TiB"`` or an integer as bytes.

    Raises ValueError (which the config reports under the key) for anything else.
    """
    if isinstance(value, SpaceAmount):
        return value
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            percent = float(value.strip().removesuffix("%"))
        except ValueError:
            raise ValueError(_SPACE_HELP) from None
        if not 0 < percent < 100:
            raise ValueError("a percent must be above 0% and below 100%")
        return SpaceAmount(percent, percent=True)
    if isinstance(value, bool | float) or not isinstance(value, int | str):
        raise ValueError(_SPACE_HELP)
    try:
        size = int(_BYTE_SIZE.validate_python(value))
    except ValidationError:
        raise ValueError(_SPACE_HELP) from None
    if size <= 0:
        raise ValueError("a size must be above 0 bytes")
    return SpaceAmount(size, percent=False)


def _dump_space(amount: SpaceAmount) -> str | int:
    return f"{amount.value:g}%" if amount.percent else int(amount.value)


Space = Annotated[SpaceAmount, PlainValidator(parse_space), PlainSerializer(_dump_space)]
