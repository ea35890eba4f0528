"""The retention service. No policies are configurable yet, so it keeps every replica."""

from __future__ import annotations

from tierd.daemon.context import Context
from tierd.logs import get_logger

__all__ = ["RetentionService"]

log = get_logger(__name__)


class RetentionService:
    """Keeps everything until retention policies exist; present so the lifecycle is complete."""

    name = "retention"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def start(self) -> None:
        """Nothing to evaluate: no tier has a retention policy."""
        log.info("retention_keeps_everything", tiers=[t.name for t in self.ctx.config.tiers])

    async def stop(self, timeout: float) -> None:
        """Nothing in flight to drain."""
