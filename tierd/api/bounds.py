"""What one request may make the daemon build: the bounds every input is checked against.

Each is checked before the work it bounds (DESIGN: "every request's cost is bounded before the
work starts"): the body's size before it is read (``api.max_body_bytes``, in ``gate``), then,
while the body is validated and before any route runs, each list's length and each string's.

- ``world_size`` and ``expected_files``: at most ``MAX_WORLD_SIZE`` and ``MAX_EXPECTED_FILES``
  (``tierd.limits`` says why; the detectors bound what a format's metadata says the same way);
- paths: at most ``MAX_PATH_BYTES`` (4,096, Linux's PATH_MAX) in UTF-8, each component at most
  ``MAX_COMPONENT_BYTES`` (255, NAME_MAX): a longer one names no file tierd could open.
- names and text a request sets (runs, paths, tiers, holds, metrics, reasons): no control
  character (C0, DEL, C1: a newline or an ESC would forge lines and colours wherever they are
  printed; PostgreSQL text cannot hold a NUL). The error names the field and the character.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from tierd.limits import MAX_EXPECTED_FILES, MAX_WORLD_SIZE

__all__ = [
    "HOLD_NAME",
    "MAX_COMPONENT_BYTES",
    "MAX_EXPECTED_FILES",
    "MAX_PATH_BYTES",
    "MAX_WORLD_SIZE",
    "NO_CONTROL",
    "ExpectedFile",
    "Glob",
    "MetricName",
    "PathText",
    "Reason",
    "RunName",
    "TierName",
    "no_control",
]

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
#: The characters no name holds, as the OpenAPI document declares them (C0, DEL, C1).
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"
#: A legal hold's name: letters, digits, '.', '_' and '-'.
HOLD_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DECLARED = Field(json_schema_extra={"pattern": NO_CONTROL})


def no_control(value: str) -> str:
    """``value`` unchanged; raises ValueError naming the first control character it holds."""
    found = _CONTROL.search(value)
    if found is not None:
        raise ValueError(f"holds a control character (U+{ord(found.group()):04X} at offset {found.start()})")
    return value


def _path_bytes(value: str) -> str:
    """``value`` unchanged; raises ValueError when it or a component is too long for Linux."""
    encoded = value.encode()
    if len(encoded) > MAX_PATH_BYTES:
        raise ValueError(f"is {len(encoded)} bytes long; at most {MAX_PATH_BYTES} (PATH_MAX)")
    longest = max(len(part) for part in encoded.split(b"/"))
    if longest > MAX_COMPONENT_BYTES:
        raise ValueError(f"has a {longest}-byte component; at most {MAX_COMPONENT_BYTES} (NAME_MAX)")
    return value


def _relative(value: str) -> str:
    """``value`` unchanged; raises ValueError unless it is relative and never climbs or repeats."""
    if any(part in ("", ".", "..") for part in value.split("/")):
        raise ValueError("must be relative to the step's path, without empty, '.' or '..' components")
    return value


_REFUSE_CONTROL = AfterValidator(no_control)
RunName = Annotated[str, StringConstraints(min_length=1, max_length=255), _REFUSE_CONTROL, _DECLARED]
TierName = Annotated[str, StringConstraints(min_length=1, max_length=32), _REFUSE_CONTROL, _DECLARED]
MetricName = Annotated[str, StringConstraints(min_length=1, max_length=128), _REFUSE_CONTROL, _DECLARED]
Reason = Annotated[
    str,
    StringConstraints(max_length=1000),
    _REFUSE_CONTROL,
    Field(description="why: kept in the audit log", json_schema_extra={"pattern": NO_CONTROL}),
]
#: A path a request names (a step's, a restore's target): PATH_MAX bytes, NAME_MAX a component.
PathText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_PATH_BYTES),
    _REFUSE_CONTROL,
    AfterValidator(_path_bytes),
    _DECLARED,
]
#: A pattern of files to restore (``fnmatch``), matched against paths: never opened itself.
Glob = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH_BYTES), _REFUSE_CONTROL, _DECLARED]
#: One file of ``expected_files``: a path relative to the step's, within PATH_MAX and NAME_MAX.
ExpectedFile = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_PATH_BYTES),
    _REFUSE_CONTROL,
    AfterValidator(_path_bytes),
    AfterValidator(_relative),
    _DECLARED,
]
