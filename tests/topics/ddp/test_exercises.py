"""The graders of lab 3 on wrong code (the bug each exercise is about) and on the stubs."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils import launch
from lab_utils.checks import FAILED, NOT_ATTEMPTED, PASSED
from lab_utils.topics.ddp import exercises
from tests.conftest import graded_fail

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def forward_outside(ddp_model, optimizer, micro_batches, k):
    """The classic mistake: only the backward inside no_sync, so every backward all-reduces."""
    optimizer.zero_grad()
    for i, (x, y) in enumerate(micro_batches):
        loss = F.mse_loss(ddp_model(x), y) / k
        with nullcontext() if (i + 1) % k == 0 else ddp_model.no_sync():
            loss.backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def without_1_over_k(ddp_model, optimizer, micro_batches, k):
    """One all-reduce per step, but the gradient is the sum of k means: k times too large."""
    optimizer.zero_grad()
    for i, (x, y) in enumerate(micro_batches):
        with nullcontext() if (i + 1) % k == 0 else ddp_model.no_sync():
            F.mse_loss(ddp_model(x), y).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def mean_loss_on_rank_0_only(local_loss):
    """The lab's bug: the collective under `if rank == 0`, so rank 0 waits for ever."""
    total = torch.tensor([float(local_loss)])
    if dist.get_rank() == 0:
        dist.all_reduce(total)
        return total.item() / dist.get_world_size()
    return None


def mean_loss_without_collective(local_loss):
    """No hang, but rank 0 reports its own loss, not the mean."""
    return float(local_loss) if dist.get_rank() == 0 else None


def fp16_hook_without_mean(state, bucket):
    """Sends float16 but forgets to divide by the world size: the SUM of the gradients."""
    buffer = bucket.buffer()
    future = dist.all_reduce(buffer.to(torch.float16), async_op=True).get_future()

    def back(fut):
        buffer.copy_(fut.value()[0])
        return buffer

    return future.then(back)


def fp32_hook(state, bucket):
    """Right average, but in float32: nothing saved on the wire."""
    buffer = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])


# Every wrong answer the graders are fed below, measured on 2 real ranks in ONE launch (a launch
# costs seconds), by the graders' own rank functions; each grader then judges its replayed result.
REPLAYED = {
    "_train_stream": ("forward_outside", "without_1_over_k"),
    "_train_with_hook": ("fp16_hook_without_mean", "fp32_hook"),
    "_mean_loss_on_rank": ("mean_loss_without_collective", "mean_loss_as_tensor"),
}


def _measure_wrong_answers() -> dict:
    return {(rank_fn, name): getattr(exercises, rank_fn)(globals()[name]) for rank_fn, names in REPLAYED.items()
            for name in names}  # fmt: skip


@pytest.fixture(scope="module")
def measured():
    return launch(_measure_wrong_answers, exercises.WORLD, timeout=240)


@pytest.fixture
def replay(monkeypatch, measured):
    """The graders' ``launch`` returns what the real ranks measured for that rank function and answer."""

    def replayed(fn, world_size, args=(), kwargs=None, timeout=None):
        assert world_size == exercises.WORLD
        return [rank[(fn.__name__, args[0].__name__)] for rank in measured]

    monkeypatch.setattr(exercises, "launch", replayed)


@pytest.mark.usefixtures("replay")
def test_accumulate_grader_catches_forward_outside():
    graded_fail(exercises.check_accumulate, forward_outside, match=f"{FAILED}.*measured 8 all-reduces, expected 2")


@pytest.mark.usefixtures("replay")
def test_accumulate_grader_catches_missing_1_over_k():
    graded_fail(exercises.check_accumulate, without_1_over_k, match=f"{FAILED}.*away from 2 large batches")


def test_accumulate_grader_stub_is_not_attempted():
    # (A stub raising inside the ranks is "not attempted" too: checks.grader reads launch's RankError;
    # tests/topics/pipeline covers that path on real ranks, so no launch is spent on it here.)
    assert exercises.check_accumulate(...) == NOT_ATTEMPTED


def test_mean_loss_grader_catches_the_hang(monkeypatch):
    monkeypatch.setattr(exercises, "HANG_TIMEOUT", 2.5)
    graded_fail(exercises.check_mean_loss, mean_loss_on_rank_0_only, match=f"{FAILED}.*still hangs")


def mean_loss_as_tensor(local_loss):
    """Right, but returns the one-element tensor on every rank: accepted."""
    total = torch.tensor([float(local_loss)])
    dist.all_reduce(total)
    return total / dist.get_world_size()


@pytest.mark.usefixtures("replay")
def test_mean_loss_grader_accepts_a_tensor_on_every_rank():
    assert exercises.check_mean_loss(mean_loss_as_tensor) == PASSED


@pytest.mark.usefixtures("replay")
def test_mean_loss_grader_catches_a_wrong_mean():
    graded_fail(exercises.check_mean_loss, mean_loss_without_collective, match=f"{FAILED}.*rank 0 returned 1.0")
    assert exercises.check_mean_loss(...) == NOT_ATTEMPTED


@pytest.mark.usefixtures("replay")
def test_fp16_grader_catches_the_sum():
    graded_fail(exercises.check_fp16_hook, fp16_hook_without_mean, match=f"{FAILED}.*divided by the world size")


@pytest.mark.usefixtures("replay")
def test_fp16_grader_catches_float32():
    graded_fail(exercises.check_fp16_hook, fp32_hook, match=f"{FAILED}.*not float16")
    assert exercises.check_fp16_hook(...) == NOT_ATTEMPTED


def test_buckets_grader_catches_the_division_guess():
    # 1.04 MiB of gradients / 0.3 MiB per bucket, rounded up: the guess the greedy rule refutes.
    graded_fail(exercises.check_buckets, 4, match=f"{FAILED}.*you predicted 4")
    assert exercises.check_buckets(...) == NOT_ATTEMPTED
