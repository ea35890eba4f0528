"""The pipeline service: moves checkpoints from each verified tier to the next."""

from __future__ import annotations

import asyncio
import contextlib

from tierd.daemon.context import Context
from tierd.daemon.service import InFlight
from tierd.logs import get_logger

__all__ = ["PipelineService"]

log = get_logger(__name__)


class PipelineService:
    """Waits for work; transfers are added by the pipeline issue."""

    name = "pipeline"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.inflight = InFlight(self.name)
        self._loop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the scheduling loop."""
        self._loop = asyncio.create_task(self._run(), name="pipeline:loop")

    async def _run(self) -> None:
        while True:
            await self.ctx.pipeline_wakeup.wait()
            self.ctx.pipeline_wakeup.clear()

    async def stop(self, timeout: float) -> None:
        """Stop scheduling and drain in-flight transfers within ``timeout``."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        await self.inflight.drain(timeout)
