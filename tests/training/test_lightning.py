"""``TierdCallback``: a tiny Lightning fit on CPU writes a checkpoint per epoch; each is notified
with its global step, the logged metrics and the world size."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.job_daemon import JobDaemon
from tierd.client import Client

RUN = "lightning-run"


# Lightning's advice for a real job (more dataloader workers) does not apply to 32 rows on CPU;
# Lightning 2.6.6 itself still uses torch's deprecated LeafSpec.
@pytest.mark.filterwarnings("ignore:.*does not have many workers:UserWarning")
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated:FutureWarning")
def test_each_checkpoint_file_is_notified_with_its_step_and_metrics(tierd: JobDaemon) -> None:
    from lightning.fabric.plugins import TorchCheckpointIO

    from tests.training.lightning_job import BATCHES_PER_EPOCH, fit
    from tierd.integrations.lightning import TierdCallback

    run_dir = tierd.run_dir(RUN)
    callback = TierdCallback(RUN, strict=True)
    trainer = fit(run_dir, callback)

    steps = [BATCHES_PER_EPOCH, 2 * BATCHES_PER_EPOCH]
    assert sorted(p.name for p in run_dir.iterdir()) == [f"step={s}.ckpt" for s in steps]
    assert callback.notified == steps
    assert type(trainer.strategy.checkpoint_io) is TorchCheckpointIO  # given back at teardown
    notified = tierd.notified(RUN)
    assert sorted(notified) == steps
    recorded = tierd.checkpoints(RUN)
    for step in steps:
        assert (recorded[step]["path"], recorded[step]["state"]) == (f"{RUN}/step={step}.ckpt", "complete")
        metrics, detail = notified[step]
        assert set(metrics) == {"train_loss", "val_loss"}
        assert detail["world_size"] == 1


@pytest.mark.filterwarnings("ignore:.*does not have many workers:UserWarning")
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")  # resuming
def test_resume_from_the_newest_durable_checkpoint(tierd: JobDaemon, tmp_path: Path) -> None:
    from tests.training.lightning_job import BATCHES_PER_EPOCH, fit
    from tierd.integrations.lightning import TierdCallback, resume_checkpoint

    assert resume_checkpoint(RUN, tmp_path / "resume") is None  # nothing yet: a fresh start
    run_dir = tierd.run_dir(RUN)
    fit(run_dir, TierdCallback(RUN, strict=True), epochs=1)
    with Client() as client:
        client.wait_durable(RUN, BATCHES_PER_EPOCH, timeout=60, poll=0.1)
    resumed = resume_checkpoint(RUN, run_dir)  # already here, verified on tier 0: nothing restored
    assert resumed == str(run_dir / f"step={BATCHES_PER_EPOCH}.ckpt")
    callback = TierdCallback(RUN, strict=True)
    fit(run_dir, callback, ckpt_path=resumed, epochs=2)
    assert callback.notified == [2 * BATCHES_PER_EPOCH]


@pytest.mark.filterwarnings("ignore:.*does not have many workers:UserWarning")
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")  # resuming
def test_resume_after_tier0_lost_the_checkpoint_restores_it(tierd: JobDaemon) -> None:
    from tests.training.lightning_job import BATCHES_PER_EPOCH, fit
    from tierd.integrations.lightning import TierdCallback, resume_checkpoint

    run_dir = tierd.run_dir(RUN)
    fit(run_dir, TierdCallback(RUN, strict=True), epochs=1)
    with Client() as client:
        client.wait_durable(RUN, BATCHES_PER_EPOCH, timeout=60, poll=0.1)
    saved = run_dir / f"step={BATCHES_PER_EPOCH}.ckpt"
    written = saved.read_bytes()
    saved.unlink()  # tier 0 lost it (a wiped NVMe): pfs still has it
    resumed = resume_checkpoint(RUN, run_dir)
    assert resumed == str(saved)
    assert saved.read_bytes() == written
    callback = TierdCallback(RUN, strict=True)
    fit(run_dir, callback, ckpt_path=resumed, epochs=2)
    assert callback.notified == [2 * BATCHES_PER_EPOCH]
