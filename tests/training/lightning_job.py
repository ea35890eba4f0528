"""The tiny Lightning job of ``test_lightning``: a linear model fit on CPU, checkpointed per epoch.

A module of its own, imported by the tests when they run: importing Lightning costs ~4 s of
CPU, which every pytest worker paid at collection while the test module imported it.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from tierd.integrations.lightning import TierdCallback

__all__ = ["BATCHES_PER_EPOCH", "Tiny", "fit", "loader"]

BATCHES_PER_EPOCH = 4


class Tiny(pl.LightningModule):
    """One linear layer, its MSE logged as ``train_loss`` and ``val_loss``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    """``BATCHES_PER_EPOCH`` batches of 8 random rows (the same every time)."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8 * BATCHES_PER_EPOCH, 4, generator=generator), torch.randn(32, 1))
    return DataLoader(data, batch_size=8, num_workers=0)


def fit(run_dir: Path, callback: TierdCallback, ckpt_path: str | None = None, epochs: int = 2) -> pl.Trainer:
    """Fit ``Tiny`` for ``epochs`` with ``callback``, a checkpoint per epoch in ``run_dir``."""
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=run_dir, filename="{step}", save_top_k=-1), callback],
    )
    trainer.fit(Tiny(), train_dataloaders=loader(), val_dataloaders=loader(), ckpt_path=ckpt_path)
    return trainer
