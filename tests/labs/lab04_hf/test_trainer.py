"""hf.trainer: TrainerMeter and summary attached to the lab's own Trainer cell, and the Trainer's
loss-scaling belief read from the Trainer."""

from __future__ import annotations

import pytest
from transformers import Trainer

from lab_utils import accelerate_meter
from lab_utils.labs.lab04_hf import data, trainer
from tests.helpers.lab04_cells import TINY, lab_functions

train_with_trainer = lab_functions("train_with_trainer")["train_with_trainer"]


def _run(**kw):
    train_ds, val_ds = data.make_splits(32, 16)
    with accelerate_meter.fresh_accelerate(), trainer.TrainerMeter() as meter:
        t = train_with_trainer(train_ds, val_ds, epochs=1, lr=1e-3, **TINY, **kw)
    return t, trainer.summary(t, meter)


def test_meter_sees_every_micro_batch_and_the_summary_the_log():
    _, run = _run()
    assert len(run.micro_losses) == 8 and run.updates == 4
    # corrected: the logged loss of an update is the mean of its micro-batch losses
    assert run.step_losses == pytest.approx(trainer.window_means(run.micro_losses, TINY["grad_accum"]), rel=1e-5)
    assert [type(e) for e in run.evals] == [trainer.Eval] and run.evals[0].epoch == 1.0
    assert run.seconds > 0 and all(g > 0 for g in run.grad_norms)
    assert Trainer.compute_loss.__qualname__ == "Trainer.compute_loss"  # the meter is gone after the block


@pytest.mark.slow
def test_trainer_skips_the_division_when_it_believes_the_model():
    as_is, r_as_is = _run(loss_is_scaled_for_ga=None)
    fixed, r_fixed = _run()
    assert as_is.model_accepts_loss_kwargs and as_is.loss_is_scaled_for_ga is None
    assert fixed.loss_is_scaled_for_ga is False
    k = TINY["grad_accum"]
    assert [a / b for a, b in zip(r_as_is.grad_norms, r_fixed.grad_norms)] == pytest.approx([k] * 4, rel=1e-4)
    # undivided: the logged loss of an update is the SUM of its micro-batch means
    assert r_as_is.step_losses == pytest.approx([k * x for x in r_fixed.step_losses], rel=1e-5)


def test_window_means_and_loss_gap():
    assert trainer.window_means([1.0, 3.0, 5.0, 7.0, 9.0], 2) == [2.0, 6.0, 9.0]
    assert trainer.loss_gap([1.0, 2.0], [1.5, 2.0]) == 0.5
    with pytest.raises(ValueError, match="not the same job"):
        trainer.loss_gap([1.0], [1.0, 2.0])
