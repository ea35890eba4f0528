"""tierd from inside the training libraries.

PyTorch DCP (``dcp``), Lightning (``lightning``) and Hugging Face ``transformers`` (``hf``).

Each module imports its library, so import only the one your job uses. They call tierd through
:mod:`tierd.client`; a failed notify is logged and training goes on (the watcher still finds the
checkpoint), unless ``strict=True`` asks for the error to be raised.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from tierd.client import Client, JsonObject
from tierd.errors import TierdError

__all__ = ["finite_metrics", "notify_step"]

log = logging.getLogger("tierd.integrations")


def finite_metrics(values: Mapping[str, Any]) -> dict[str, float]:
    """The values that are finite numbers (floats, ints, one-element tensors), as floats."""
    out: dict[str, float] = {}
    for name, value in values.items():
        try:
            number = float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError, RuntimeError):
            continue
        if math.isfinite(number) and not isinstance(value, bool):
            out[str(name)] = number
    return out


def notify_step(
    client: Client | None,
    run: str,
    step: int,
    path: str | os.PathLike[str],
    *,
    metrics: Mapping[str, float] | None = None,
    world_size: int | None = None,
    strict: bool = False,
) -> JsonObject | None:
    """Tell tierd the step is written; returns the checkpoint, or None when the notify failed.

    A TierdError (ApiError, Unreachable) is logged as a warning, or raised with ``strict``.
    """
    path = os.path.abspath(path)
    try:
        if client is not None:
            return client.notify(run, step, path, metrics=metrics or None, world_size=world_size)
        with Client() as own:
            return own.notify(run, step, path, metrics=metrics or None, world_size=world_size)
    except TierdError as exc:
        if strict:
            raise
        log.warning("tierd notify of %s:%s at %s failed: %s", run, step, path, exc)
        return None
