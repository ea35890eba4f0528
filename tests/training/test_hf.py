"""``TierdTrainerCallback``: a tiny GPT-2 (built from a config, nothing downloaded) trained on CPU
saves ``checkpoint-2`` and ``checkpoint-4``; each is notified with that step's eval metrics.

The ``Trainer`` itself needs ``accelerate`` (transformers' ``[torch]`` extra, in tierd's dev
extras); where it is missing, that test skips and the hand-written loop below, which writes the
same ``checkpoint-N`` layout and calls the callback as the Trainer does, still runs.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest
import torch

from tests.fixtures.job_daemon import JobDaemon

if TYPE_CHECKING:
    from transformers import GPT2LMHeadModel

# transformers is imported by the tests (~4 s of CPU), which share an xdist worker: the other
# worker, which collects this file too, never imports it.
pytestmark = pytest.mark.xdist_group("hf")

RUN = "hf-run"
VOCAB = 64


def batches(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (n, 16), generator=generator)
    return [{"input_ids": row, "labels": row} for row in ids]


def tiny_gpt2() -> GPT2LMHeadModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def assert_notified(tierd: JobDaemon, log_history: list[dict[str, float]]) -> None:
    """checkpoint-2 and checkpoint-4 are recorded, each with its step's eval_loss from the log."""
    recorded = tierd.checkpoints(RUN)
    notified = tierd.notified(RUN)
    evals = {e["step"]: e["eval_loss"] for e in log_history if "eval_loss" in e}
    assert sorted(recorded) == [2, 4]
    for step in (2, 4):
        assert (recorded[step]["path"], recorded[step]["format"]) == (f"{RUN}/checkpoint-{step}", "hf")
        metrics, detail = notified[step]
        assert metrics["eval_loss"] == pytest.approx(evals[step])  # the detector may add trainer_state's
        assert detail["world_size"] == 1


def test_each_trainer_save_is_notified_with_the_steps_eval_metrics(tierd: JobDaemon) -> None:
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
    from transformers import Trainer, TrainingArguments

    from tierd.integrations.hf import TierdTrainerCallback

    run_dir = tierd.run_dir(RUN)
    model = tiny_gpt2()
    args = TrainingArguments(
        output_dir=str(run_dir),
        max_steps=4,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        logging_steps=2,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    callback = TierdTrainerCallback(RUN, strict=True)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=batches(16, 1),
        eval_dataset=batches(8, 2),
        callbacks=[callback],
    )
    trainer.train()

    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint-2", "checkpoint-4"]
    assert callback.notified == [2, 4]
    assert_notified(tierd, trainer.state.log_history)


def test_a_loop_saving_as_the_trainer_does_is_notified(tierd: JobDaemon) -> None:
    """Train, evaluate every 2 steps, write checkpoint-N (weights, then trainer_state.json), on_save."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from tierd.integrations.hf import TierdTrainerCallback, eval_metrics

    run_dir = tierd.run_dir(RUN)
    model = tiny_gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train, evaluation = batches(16, 1), batches(8, 2)
    args = cast(TrainingArguments, SimpleNamespace(output_dir=str(run_dir), world_size=1))
    state, control = TrainerState(), TrainerControl()
    callback = TierdTrainerCallback(RUN, strict=True)
    for step in range(1, 5):
        batch = torch.stack([b["input_ids"] for b in train[(step - 1) * 4 : step * 4]])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.global_step = step
        state.log_history.append({"loss": loss.item(), "step": step})
        if step % 2:
            continue
        with torch.no_grad():
            held_out = torch.stack([b["input_ids"] for b in evaluation])
            eval_loss = model(input_ids=held_out, labels=held_out).loss.item()
        state.log_history.append({"eval_loss": eval_loss, "eval_runtime": 0.01, "step": step})
        checkpoint = run_dir / f"checkpoint-{step}"
        model.save_pretrained(checkpoint)
        state.save_to_json(str(checkpoint / "trainer_state.json"))
        callback.on_save(args, state, control)

    assert callback.notified == [2, 4]
    assert eval_metrics(state) == {"eval_loss": pytest.approx(eval_loss), "eval_runtime": 0.01}
    assert_notified(tierd, state.log_history)
