"""The graders of lab 3 on wrong code (the bug each exercise is about) and on the stubs."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab_utils import launch
from lab_utils.checks import FAILED, NOT_ATTEMPTED, PASSED
from lab_utils.labs.lab03_ddp import exercises
from tests.helpers.grading import graded_fail

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


NOTEBOOK_K = 4  # the notebook's global K


def uses_the_global_k(ddp_model, optimizer, micro_batches, k):
    """A student's loop that reads the notebook's K = 4, not its argument k (the grader's k is 3)."""
    optimizer.zero_grad()
    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % NOTEBOOK_K == 0
        with nullcontext() if last else ddp_model.no_sync():
            (F.mse_loss(ddp_model(x), y) / NOTEBOOK_K).backward()
        if last:
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


def fp16_hook_returns_half(state, bucket):
    """Averages in float16, but hands DDP the float16 tensor instead of the bucket's float32 one."""
    half = bucket.buffer().div(dist.get_world_size()).to(torch.float16)
    return dist.all_reduce(half, async_op=True).get_future().then(lambda fut: fut.value()[0])


def syncs_first(ddp_model, optimizer, micro_batches, k):
    """One all-reduce per step, but on the FIRST micro-step of each group: the later ones stay local."""
    for i, (x, y) in enumerate(micro_batches):
        with nullcontext() if i % k == 0 else ddp_model.no_sync():
            (F.mse_loss(ddp_model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def no_zero_grad(ddp_model, optimizer, micro_batches, k):
    """One all-reduce per step, but the gradients are never zeroed after a step: they pile up."""
    optimizer.zero_grad()
    for i, (x, y) in enumerate(micro_batches):
        with nullcontext() if (i + 1) % k == 0 else ddp_model.no_sync():
            (F.mse_loss(ddp_model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()


def mean_loss_sum(local_loss):
    """No hang, but the all-reduced SUM is reported as the mean."""
    total = torch.tensor([float(local_loss)])
    dist.all_reduce(total)
    return total.item() if dist.get_rank() == 0 else None


def mean_loss_over_two(local_loss):
    """Right on 2 ranks only: the world size hard-coded."""
    total = torch.tensor([float(local_loss)])
    dist.all_reduce(total)
    return total.item() / 2 if dist.get_rank() == 0 else None


# Every wrong answer the graders are fed below, measured on real ranks in one launch per world size
# (a launch costs seconds), by the graders' own rank functions; each grader then judges its replayed
# result. ddp-hang runs on 3 ranks, the others on 2.
REPLAYED = {
    exercises.WORLD: {
        "_train_stream": ("forward_outside", "without_1_over_k", "no_zero_grad", "uses_the_global_k", "syncs_first"),
        "_train_with_hook": ("fp16_hook_without_mean", "fp32_hook", "fp16_hook_returns_half"),
    },
    exercises.MEAN_WORLD: {
        "_mean_loss_on_rank": ("mean_loss_without_collective", "mean_loss_as_tensor", "mean_loss_sum",
                               "mean_loss_over_two"),
    },
}  # fmt: skip


def _measure_wrong_answers(world: int) -> dict:
    out = {(rank_fn, name): getattr(exercises, rank_fn)(globals()[name]) for rank_fn, names in REPLAYED[world].items()
           for name in names}  # fmt: skip
    if world == exercises.WORLD:  # exercise 2's run: it does not depend on the answer
        out[("counts", None)] = exercises.counts(caps=(exercises.BUCKET_CAP_MB,), steps=2)
    return out


@pytest.fixture(scope="module")
def measured():
    return {world: launch(_measure_wrong_answers, world, args=(world,), timeout=240) for world in REPLAYED}


@pytest.fixture
def replay(monkeypatch, measured):
    """The graders' ``launch`` returns what the real ranks measured for that rank function and answer."""

    def replayed(fn, world_size, args=(), kwargs=None, timeout=None):
        key = (fn.__name__, args[0].__name__ if args else None)
        return [rank[key] for rank in measured[world_size]]

    monkeypatch.setattr(exercises, "launch", replayed)


@pytest.mark.usefixtures("replay")
def test_accumulate_grader_catches_forward_outside():
    n = exercises.K * exercises.UPDATES
    graded_fail(exercises.check_accumulate, forward_outside, match=f"{FAILED}.*measured {n} all-reduces, expected 2")


@pytest.mark.usefixtures("replay")
def test_accumulate_grader_catches_the_notebooks_global_k():
    assert exercises.K != NOTEBOOK_K  # the grader's k is one the notebook does not use
    graded_fail(exercises.check_accumulate, uses_the_global_k, match=f"{FAILED}.*k=3.*measured 1 all-reduces")


@pytest.mark.usefixtures("replay")
def test_accumulate_grader_catches_missing_1_over_k():
    graded_fail(
        exercises.check_accumulate, without_1_over_k, match=f"{FAILED}.*away from 2 large batches.*not divided by k"
    )


@pytest.mark.usefixtures("replay")
def test_accumulate_grader_names_the_missing_zero_grad():
    graded_fail(exercises.check_accumulate, no_zero_grad, match=f"{FAILED}.*no zero_grad.*optimizer.zero_grad")


def test_accumulate_grader_stub_is_not_attempted():
    # (A stub raising inside the ranks is "not attempted" too: checks.grader reads launch's RankError;
    # tests/labs/lab06_pipeline covers that path on real ranks, so no launch is spent on it here.)
    assert exercises.check_accumulate(...) == NOT_ATTEMPTED


def test_mean_loss_grader_catches_the_hang(monkeypatch):
    monkeypatch.setattr(exercises, "HANG_TIMEOUT", 2.5)
    graded_fail(exercises.check_mean_loss, mean_loss_on_rank_0_only, match=f"{FAILED}.*hangs")


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
def test_mean_loss_grader_says_sum_vs_mean():
    graded_fail(exercises.check_mean_loss, mean_loss_sum, match=f"{FAILED}.*returned 10.5, the SUM.*get_world_size")


@pytest.mark.usefixtures("replay")
def test_mean_loss_grader_catches_a_hard_coded_world_size():
    graded_fail(exercises.check_mean_loss, mean_loss_over_two, match=f"{FAILED}.*3 ranks.*fixed number")


@pytest.mark.usefixtures("replay")
def test_fp16_grader_catches_the_sum():
    graded_fail(exercises.check_fp16_hook, fp16_hook_without_mean, match=f"{FAILED}.*divided by the world size")


@pytest.mark.usefixtures("replay")
def test_fp16_grader_catches_a_float16_future():
    graded_fail(exercises.check_fp16_hook, fp16_hook_returns_half, match=f"{FAILED}.*future's value is .'float16'.")


@pytest.mark.usefixtures("replay")
def test_accumulate_grader_names_the_micro_step_that_must_sync():
    graded_fail(exercises.check_accumulate, syncs_first, match=f"{FAILED}.*ranks ended with different.*last micro-step")


@pytest.mark.usefixtures("replay")
def test_fp16_grader_catches_float32():
    graded_fail(exercises.check_fp16_hook, fp32_hook, match=f"{FAILED}.*not float16")
    assert exercises.check_fp16_hook(...) == NOT_ATTEMPTED


@pytest.mark.usefixtures("replay")
def test_buckets_grader_names_each_wrong_rule_and_accepts_a_whole_float():
    # at 0.001 MiB: 6 buckets in backward order, 7 in registration order, 1038 by dividing the bytes
    graded_fail(exercises.check_buckets, 7, match=f"{FAILED}.*you predicted 7.*REGISTRATION order")
    graded_fail(exercises.check_buckets, 1038, match=f"{FAILED}.*you predicted 1038.*divided by the cap")
    graded_fail(exercises.check_buckets, 5, match=f"{FAILED}.*you predicted 5.*one fewer")  # the last bucket left out
    graded_fail(exercises.check_buckets, 11, match=f"{FAILED}.*you predicted 11.*never lets a bucket exceed")
    graded_fail(exercises.check_buckets, 12, match=f"{FAILED}.*you predicted 12.*one bucket per gradient.*at least")
    graded_fail(exercises.check_buckets, 1, match=f"{FAILED}.*you predicted 1;.*first backward.*after the rebuild")
    graded_fail(exercises.check_buckets, 6.5, match=f"{FAILED}.*whole number")
    assert exercises.check_buckets(6.0) == exercises.check_buckets("6") == PASSED
    assert exercises.check_buckets(...) == NOT_ATTEMPTED
