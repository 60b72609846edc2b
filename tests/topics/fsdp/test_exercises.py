"""The graders of lab 7 on wrong code (the bug each exercise is about) and on the stubs."""

from __future__ import annotations

import pytest
import torch.nn.functional as F

from lab_utils.checks import FAILED, NOT_ATTEMPTED
from lab_utils.topics.fsdp import exercises
from tests.conftest import graded_fail

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def sync_on_first_micro_step(model, optimizer, micro_batches, k):
    """One reduce-scatter per window, as asked, but on the window's FIRST micro-step: the other
    micro-steps' gradients stay unsharded and never reach the optimizer."""
    for i, (x, y) in enumerate(micro_batches):
        model.set_requires_gradient_sync(i % k == 0)
        (F.mse_loss(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def even_shards(model, world_size, rank):
    """The ZeRO table applied per tensor: numel // W, as if every first dim divided by W."""
    local = sum(p.numel() // world_size * p.element_size() for p in model.parameters())
    return {"params": local, "grads": local, "optimizer": 2 * local}


def stub_rank_bytes(model, world_size, rank):
    raise NotImplementedError()


def never_reshards(model, optimizer, micro_batches):
    """Gathers once per update, but keeps the whole model gathered after the update."""
    k = len(micro_batches)
    model.set_reshard_after_forward(False)
    model.set_reshard_after_backward(False)
    for i, (x, y) in enumerate(micro_batches):
        model.set_requires_gradient_sync(i == k - 1)
        (F.mse_loss(model(x), y) / k).backward()
    optimizer.step()
    optimizer.zero_grad()


def test_windows_grader_catches_sync_on_the_first_micro_step():
    graded_fail(exercises.check_windows, sync_on_first_micro_step, match=f"{FAILED}.*away from 2 large-batch steps")


def test_rank_bytes_grader_catches_even_shards():
    graded_fail(exercises.check_rank_bytes, even_shards, match=f"{FAILED}.*rank 0: predicted")


def test_fewer_gathers_grader_catches_gathered_parameters_left_behind():
    graded_fail(exercises.check_fewer_gathers, never_reshards, match=f"{FAILED}.*still hold")


def test_stubs_are_not_attempted():
    assert exercises.check_windows(...) == NOT_ATTEMPTED
    assert exercises.check_fewer_gathers(...) == NOT_ATTEMPTED
    assert exercises.check_rank_bytes(stub_rank_bytes) == NOT_ATTEMPTED  # raises before any launch
