"""PyTorch Distributed Checkpoint: ``save`` notifies tierd once the step is written.

It wraps ``dcp.save`` / ``dcp.async_save``.

::

    from tierd.integrations import dcp as tierd_dcp

    tierd_dcp.save({"model": model.state_dict()}, f"/nvme/ckpt/llama/step_{step}",
                   run="llama", step=step, metrics={"loss": loss})

Every rank calls it (it is collective, like ``dcp.save``); the coordinator (rank 0 of the
process group, the rank that writes ``.metadata``) notifies tierd with the step, the metrics
and the world size after the save finished: at once for ``dcp.save``, and when the save's
future completes for ``async_save``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from tierd.client import Client
from tierd.integrations import log, notify_step

__all__ = ["save"]


def save(
    state_dict: dict[str, Any],
    checkpoint_id: str | os.PathLike[str],
    *,
    run: str,
    step: int,
    client: Client | None = None,
    metrics: Mapping[str, float] | None = None,
    async_save: bool = False,
    process_group: dist.ProcessGroup | None = None,
    strict: bool = False,
    **kwargs: Any,
) -> Any:
    """``dcp.save`` (or ``dcp.async_save``) into ``checkpoint_id``, then notify from the coordinator.

    Returns what DCP returns (its Metadata, or the async save's future or response). A failed
    notify is logged, or raised (TierdError) with ``strict`` (for ``async_save`` it is logged).
    """
    coordinator, world_size = _coordinator(process_group, bool(kwargs.get("no_dist", False)))
    given = dict(metrics or {})

    def notify() -> None:
        notify_step(client, run, step, checkpoint_id, metrics=given, world_size=world_size, strict=strict)

    if not async_save:
        result = dcp_save(state_dict, checkpoint_id=checkpoint_id, process_group=process_group, **kwargs)
        if coordinator:
            notify()
        return result
    pending = dcp_async_save(state_dict, checkpoint_id=checkpoint_id, process_group=process_group, **kwargs)
    if coordinator:
        future = pending.upload_completion if isinstance(pending, AsyncSaveResponse) else pending
        future.add_done_callback(lambda done: _after(done, notify, run, step))
    return pending


def _coordinator(process_group: dist.ProcessGroup | None, no_dist: bool) -> tuple[bool, int]:
    """Whether this rank is DCP's coordinator (group rank 0), and the group's size."""
    if no_dist or not (dist.is_available() and dist.is_initialized()):
        return True, 1
    return dist.get_rank(process_group) == 0, dist.get_world_size(process_group)


def _after(done: Future[Any], notify: Any, run: str, step: int) -> None:
    error = done.exception()
    if error is not None:
        log.warning("async DCP save of %s:%s failed, tierd not notified: %s", run, step, error)
        return
    try:
        notify()
    except Exception:  # a done-callback's error would only be logged by concurrent.futures
        log.exception("tierd notify of %s:%s failed", run, step)
