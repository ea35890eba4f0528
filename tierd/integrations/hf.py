"""Hugging Face ``transformers``: a ``TrainerCallback`` that notifies tierd of each checkpoint.

Each ``checkpoint-N`` the Trainer saves is announced with that step's eval metrics (so
``keep_best`` can rank them).

::

    from tierd.integrations.hf import TierdTrainerCallback

    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation,
                      callbacks=[TierdTrainerCallback(run="llama")])

``on_save`` runs after ``Trainer._save_checkpoint`` has written ``checkpoint-N`` under
``args.output_dir`` (``trainer_state.json`` last) and after the evaluation of that step, whose
``eval_*`` figures are then in ``state.log_history``. The world's process 0 notifies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from tierd.client import Client
from tierd.integrations import finite_metrics, notify_step

__all__ = ["TierdTrainerCallback", "eval_metrics"]


def eval_metrics(state: TrainerState) -> dict[str, float]:
    """The ``eval_*`` figures logged at the current global step (the last logged wins)."""
    merged: dict[str, Any] = {}
    for entry in state.log_history:
        if entry.get("step") == state.global_step:
            merged.update({k: v for k, v in entry.items() if k.startswith("eval_")})
    return finite_metrics(merged)


class TierdTrainerCallback(TrainerCallback):
    """Notify tierd of every checkpoint the Trainer saves, with the step's eval metrics."""

    def __init__(self, run: str, *, client: Client | None = None, strict: bool = False) -> None:
        self.run = run
        self.client = client
        self.strict = strict
        self.notified: list[int] = []

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """``checkpoint-{global_step}`` is written: notify from process 0."""
        if not state.is_world_process_zero:
            return
        step = state.global_step
        path = Path(args.output_dir or ".") / f"{PREFIX_CHECKPOINT_DIR}-{step}"
        answer = notify_step(
            self.client,
            self.run,
            step,
            path,
            metrics=eval_metrics(state),
            world_size=args.world_size,
            strict=self.strict,
        )
        if answer is not None:
            self.notified.append(step)
