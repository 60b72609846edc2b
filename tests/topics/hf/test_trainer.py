"""hf.trainer: the loss-scaling belief, and TrainerMeter / summary attached to a real Trainer."""

from __future__ import annotations

import pytest
import torch
from transformers import Trainer

from lab_utils.topics.hf import data, meters, trainer
from tests.topics.hf.jobs import TINY, train_with_trainer


def test_loss_scaling_belief():
    model = data.build_model()
    assert trainer.model_scales_loss_itself(model)  # forward(**kwargs): the Trainer will not divide
    model.accepts_loss_kwargs = False
    assert not trainer.model_scales_loss_itself(model)
    assert not trainer.model_scales_loss_itself(torch.nn.Linear(2, 2))


def test_meter_sees_every_micro_batch_and_the_summary_the_log():
    with trainer.TrainerMeter(batches=2) as meter:
        t, _ = train_with_trainer(**TINY)
    run = trainer.summary(t, meter)
    k = TINY["grad_accum"]
    assert len(run["micro_losses"]) == 8 and run["updates"] == 4 and len(meter.saved) == 2
    # with the fix, the logged loss of an update is the mean of its micro-batch losses
    assert run["step_losses"] == pytest.approx(meters.window_means(run["micro_losses"], k), rel=1e-5)
    assert len(run["evals"]) == 1 and run["seconds"] > 0 and run["saved_bytes"] > 0
    assert (run["cuda_peak_bytes"] is None) == (not torch.cuda.is_available())
    assert Trainer.compute_loss is meter._original  # the meter is gone after the block


@pytest.mark.slow
def test_trainer_skips_the_division_when_it_trusts_the_model():
    job = dict(TINY, evaluate=False)
    with trainer.TrainerMeter() as m_fixed:
        fixed, _ = train_with_trainer(**job)
    unfixed, _ = train_with_trainer(**job, fix=False)
    assert trainer.model_scales_loss_itself(unfixed.model) and not trainer.model_scales_loss_itself(fixed.model)
    k = TINY["grad_accum"]
    windows = meters.window_means(m_fixed.micro_losses, k)
    assert trainer.summary(fixed)["step_losses"] == pytest.approx(windows, rel=1e-5)
    # undivided: the logged loss of the first update is the SUM of its micro-batch means
    ratio = trainer.summary(unfixed)["step_losses"][0] / trainer.summary(fixed)["step_losses"][0]
    assert ratio == pytest.approx(k, rel=1e-5)


@pytest.mark.slow
def test_checkpointing_and_accumulation_cut_saved_bytes():
    job = dict(n_train=32, n_val=16, epochs=1, lr=1e-3, seed=42, evaluate=False)
    saved = {}
    for name, cfg in {
        "plain": dict(batch_size=8, grad_accum=1, checkpointing=False),
        "accum": dict(batch_size=2, grad_accum=4, checkpointing=False),
        "ckpt": dict(batch_size=2, grad_accum=4, checkpointing=True),
    }.items():
        with trainer.TrainerMeter(batches=1) as meter:
            train_with_trainer(**job, **cfg)
        saved[name] = meter.saved_bytes
    assert saved["plain"] == pytest.approx(4 * saved["accum"], rel=0.02)
    assert saved["ckpt"] < saved["accum"] / 3
