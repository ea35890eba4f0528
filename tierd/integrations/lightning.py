"""Lightning: a callback that notifies tierd of each checkpoint file, and a resume helper.

The callback tells tierd about each checkpoint file once it is written; ``resume_checkpoint``
gives ``fit`` the newest durable step, restored if needed.

::

    from tierd.integrations.lightning import TierdCallback, resume_checkpoint

    trainer = L.Trainer(callbacks=[ModelCheckpoint(dirpath=ckpt_dir, monitor="val_loss"),
                                   TierdCallback(run="llama")])
    trainer.fit(model, ckpt_path=resume_checkpoint("llama", ckpt_dir))

The callback wraps the strategy's ``CheckpointIO`` for the fit: when its ``save_checkpoint``
returns, the file is whole (Lightning writes it in one go, a ``torch.save`` zip), so the global
rank 0 notifies with the checkpoint's ``global_step``, the metrics logged so far
(``trainer.callback_metrics``) and the world size. Every save goes through it: ModelCheckpoint's
top-k and last files, and ``trainer.save_checkpoint``. (With an ``AsyncCheckpointIO`` the file
is written later; the watcher records it then, the callback notifies nothing.)

Resuming is not a callback hook: Lightning loads ``fit(ckpt_path=...)`` before ``on_fit_start``,
so ``resume_checkpoint`` runs before ``fit`` and hands it the path.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
from lightning.pytorch.plugins.io.async_plugin import AsyncCheckpointIO

from tierd.client import Client
from tierd.integrations import finite_metrics, notify_step

__all__ = ["TierdCallback", "resume_checkpoint"]


class TierdCallback(pl.Callback):
    """Notify tierd of every checkpoint file the trainer writes, with its step and metrics."""

    def __init__(self, run: str, *, client: Client | None = None, strict: bool = False) -> None:
        self.run = run
        self.client = client
        self.strict = strict
        self.notified: list[int] = []
        self._wrapped: _NotifyingIO | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Wrap the strategy's CheckpointIO for this fit."""
        inner = trainer.strategy.checkpoint_io
        if stage != "fit" or isinstance(inner, (_NotifyingIO, AsyncCheckpointIO)):
            return
        self._wrapped = _NotifyingIO(inner, self, trainer)
        trainer.strategy.checkpoint_io = self._wrapped

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Give the strategy its own CheckpointIO back."""
        if self._wrapped is not None and trainer.strategy.checkpoint_io is self._wrapped:
            trainer.strategy.checkpoint_io = self._wrapped.inner
        self._wrapped = None

    def saved(self, trainer: pl.Trainer, checkpoint: dict[str, Any], path: str | os.PathLike[str]) -> None:
        """The file at ``path`` is written: notify from global rank 0."""
        if not trainer.is_global_zero:
            return
        step = int(checkpoint.get("global_step", trainer.global_step))
        metrics = finite_metrics(trainer.callback_metrics)
        answer = notify_step(
            self.client,
            self.run,
            step,
            path,
            metrics=metrics,
            world_size=trainer.world_size,
            strict=self.strict,
        )
        if answer is not None:
            self.notified.append(step)


#: What Lightning's CheckpointIO takes as a path.
LightningPath = str | Path


class _NotifyingIO(CheckpointIO):
    """The strategy's CheckpointIO, telling the callback after each file it wrote."""

    def __init__(self, inner: CheckpointIO, callback: TierdCallback, trainer: pl.Trainer) -> None:
        self.inner = inner
        self._callback = callback
        self._trainer = trainer

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: LightningPath, storage_options: Any | None = None
    ) -> None:
        self.inner.save_checkpoint(checkpoint, path, storage_options)
        self._callback.saved(self._trainer, checkpoint, path)

    def load_checkpoint(
        self, path: LightningPath, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        loaded: dict[str, Any] = self.inner.load_checkpoint(
            path, map_location=map_location, weights_only=weights_only
        )
        return loaded

    def remove_checkpoint(self, path: LightningPath) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def resume_checkpoint(
    run: str, dest: str | os.PathLike[str], *, client: Client | None = None, durable: bool = True
) -> str | None:
    """The local path of the run's newest (durable) checkpoint, restored into ``dest`` if needed.

    None when the run has none yet (a fresh start). Raises TierdError when the restore fails.
    """
    own = client is None
    tierd = client or Client()
    try:
        latest = tierd.latest(run, durable=durable)
        if latest is None:
            return None
        local = tierd.ensure_local(run, latest["step"], dest, durable=durable)
    finally:
        if own:
            tierd.close()
    name = PurePosixPath(latest["path"]).name
    return str(local / name) if name.endswith(".ckpt") else str(local)
