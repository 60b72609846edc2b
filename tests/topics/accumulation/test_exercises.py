"""Each grader fails the bug its exercise is about and says "not attempted" for a stub."""

import pytest
import torch
import torch.nn.functional as F

from lab_utils import solutions
from lab_utils.checks import NOT_ATTEMPTED, PASSED
from lab_utils.topics import accumulation
from lab_utils.topics.accumulation import exercises


# ----------------------------------------------------------------------------- Exercise 1
def tf_port(divide: bool):
    def tf_style_accumulate(model, micro_batches, loss_fn):
        params = list(model.parameters())
        accum_vars = [torch.zeros_like(p) for p in params]
        for mb in micro_batches:
            for acc, g in zip(accum_vars, torch.autograd.grad(loss_fn(model, mb), params)):
                acc.add_(g / len(micro_batches) if divide else g)
        return accum_vars

    return tf_style_accumulate


def test_tf_port_passes_with_the_division_and_fails_as_the_seed_wrote_it(capsys):
    assert exercises.check_tf_port(tf_port(divide=True)) == PASSED
    with pytest.raises(AssertionError, match="✗.*norm is 3 x"):
        exercises.check_tf_port(tf_port(divide=False))  # the seed's recipe: a sum of 3 means


def test_tf_port_fails_when_it_fills_grad_instead_of_buffers():
    def through_grad(model, micro_batches, loss_fn):
        for mb in micro_batches:
            (loss_fn(model, mb) / len(micro_batches)).backward()
        return [p.grad for p in model.parameters()]

    with pytest.raises(AssertionError, match="✗.*filled .grad"):
        exercises.check_tf_port(through_grad)


# ----------------------------------------------------------------------------- Exercise 2
def clipping(*, per_micro_batch: bool = False, unscale: bool = True, use_scaler: bool = True):
    def accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler):
        def clip():
            if unscale and use_scaler:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

        for window in accumulation.windows(micro_batches, K):
            for x, y in window:
                loss = F.mse_loss(model(x), y) / len(window)
                (scaler.scale(loss) if use_scaler else loss).backward()
                if per_micro_batch:
                    clip()
            if not per_micro_batch:
                clip()
            if use_scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()

    return accumulate_with_clipping


def test_the_instructors_clipping_passes():
    names = {"torch": torch, "F": F, "accumulation": accumulation}
    ns = solutions.solution("02_gradient_accumulation", "acc-clip", names)
    assert exercises.check_clipping(ns["accumulate_with_clipping"]) == PASSED


@pytest.mark.parametrize(
    "wrong, message",
    [
        (clipping(per_micro_batch=True), "torch stopped your loop.*unscale_"),  # a second unscale_ in a window
        (clipping(per_micro_batch=True, unscale=False), "clipped large batch"),  # clips partial, scaled sums
        (clipping(unscale=False), "clipped large batch"),  # clips the scaled gradient: 2^16 times too long
        (clipping(use_scaler=False), "scaler.scale was called 0 times"),  # right parameters, scaler ignored
    ],
)
def test_clipping_fails_per_micro_batch_without_unscale_or_without_the_scaler(wrong, message):
    with pytest.raises(AssertionError, match=f"✗.*{message}"):
        exercises.check_clipping(wrong)


# ----------------------------------------------------------------------------- Exercise 3
def mean_of_means(model, mb, window):
    return accumulation.lm_token_loss_sum(model, mb) / accumulation.count_tokens(mb) / len(window)


def window_tokens(model, mb, window):
    return accumulation.lm_token_loss_sum(model, mb) / sum(accumulation.count_tokens(m) for m in window)


def test_token_loss_window_count_passes_and_mean_of_means_fails():
    assert exercises.check_token_loss(window_tokens) == PASSED
    with pytest.raises(AssertionError, match="✗.*differs from the large batch"):
        exercises.check_token_loss(mean_of_means)


# ----------------------------------------------------------------------------- Exercise 4
def test_norms_right_set_passes_and_forgetting_frozen_batchnorm_fails():
    assert exercises.check_norms({"layernorm", "groupnorm", "batchnorm-eval"}) == PASSED
    with pytest.raises(AssertionError, match="✗"):
        exercises.check_norms({"layernorm", "groupnorm"})
    with pytest.raises(AssertionError, match="unknown names"):
        exercises.check_norms({"rmsnorm"})


# ----------------------------------------------------------------------------- stubs
def stub(*args):
    raise NotImplementedError()


@pytest.mark.parametrize(
    "check", [exercises.check_tf_port, exercises.check_clipping, exercises.check_token_loss, exercises.check_norms]
)
def test_stubs_are_not_attempted(check, capsys):
    assert check(...) == NOT_ATTEMPTED
    assert "not attempted" in capsys.readouterr().out
    if check is not exercises.check_norms:
        assert check(stub) == NOT_ATTEMPTED
