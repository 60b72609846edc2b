"""hf.handsync: the reference accumulate() loop and a hand-written one, compared on one process."""

from __future__ import annotations

import torch

from lab_utils.topics.hf import guards, handsync


def _right(accelerator, model, optimizer, batches):
    for i, (x, y) in enumerate(batches):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))  # divides by k
        if (i + 1) % accelerator.gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def _every_micro_batch(accelerator, model, optimizer, batches):
    for x, y in batches:
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def test_compare_on_one_process_tells_right_from_wrong():
    guards.reset_accelerate_state()
    try:
        right = handsync.compare_on_rank(_right)
        guards.reset_accelerate_state()
        wrong = handsync.compare_on_rank(_every_micro_batch)
    finally:
        guards.reset_accelerate_state()
    assert right["world"] == 1 and right["moved"] > 1e-3  # the reference trained
    assert right["gap"] <= 1e-6 and right["collectives"] == right["reference_collectives"] == 0
    assert wrong["gap"] > 1e-3
