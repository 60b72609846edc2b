"""The graders of lab 7 on wrong code (the bug each exercise is about) and on the stubs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.fsdp import FSDPModule

from lab_utils.checks import FAILED, NOT_ATTEMPTED
from lab_utils.labs.lab07_fsdp import exercises
from tests.helpers.grading import graded_fail

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def gradient_sync_instead(model, optimizer, micro_batches, k):
    """Accumulates with set_requires_gradient_sync: right gradients, but no reduce-scatter either, so
    each rank holds unsharded gradients between micro-steps (not HSDP's all-reduce toggle)."""
    for i, (x, y) in enumerate(micro_batches):
        model.set_requires_gradient_sync((i + 1) % k == 0)
        (F.mse_loss(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def forgets_k(model, optimizer, micro_batches, k):
    """The all-reduce toggle right, each loss not divided by k."""
    for i, (x, y) in enumerate(micro_batches):
        model.set_requires_all_reduce((i + 1) % k == 0)
        F.mse_loss(model(x), y).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def fewer_gathers_without_k(model, optimizer, micro_batches):
    """fsdp-gathers' settings right, each loss not divided by k: k times the gradient."""
    k = len(micro_batches)
    model.set_reshard_after_forward(False)
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)
        F.mse_loss(model(x), y).backward()
    model.set_reshard_after_forward(True)
    optimizer.step()
    optimizer.zero_grad()


def even_shards(model, world_size, rank):
    """The ZeRO table applied per tensor: numel // W, as if every first dim divided by W."""
    local = sum(p.numel() // world_size * p.element_size() for p in model.parameters())
    return {"params": local, "grads": local, "optimizer": 2 * local}


def tensor_split_rows(model, world_size, rank):
    """torch.tensor_split's rule (the first rows % W ranks get one row more) instead of torch.chunk's
    (ceil(rows / W) each until the rows run out): the same on 2 ranks, not on 4."""
    local = 0
    for p in model.parameters():
        rows = torch.tensor_split(torch.arange(p.shape[0]), world_size)[rank].numel()
        local += rows * (p.numel() // p.shape[0]) * p.element_size()
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


def reshard_after_forward_never_set_back(model, optimizer, micro_batches):
    """Right gathers, gradient and nothing left gathered at the end, but reshard_after_forward stays
    False: every later forward keeps the whole model gathered until its backward."""
    k = len(micro_batches)
    model.set_reshard_after_forward(False)
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)
        (F.mse_loss(model(x), y) / k).backward()
    optimizer.step()
    optimizer.zero_grad()


def both_off_freed_by_hand(model, optimizer, micro_batches):
    """Both reshard settings off for the update, every block freed by hand at its end and
    reshard_after_forward set back, but not reshard_after_backward: later backwards keep the model
    gathered."""
    k = len(micro_batches)
    model.set_reshard_after_forward(False)
    model.set_reshard_after_backward(False)
    for i, (x, y) in enumerate(micro_batches):
        model.set_requires_gradient_sync(i == k - 1)
        (F.mse_loss(model(x), y) / k).backward()
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
    model.set_reshard_after_forward(True)
    optimizer.step()
    optimizer.zero_grad()


def one_forward_of_all_micro_batches(model, optimizer, micro_batches):
    """No accumulation at all: the K micro-batches concatenated into one forward, kept gathered
    to its backward. Right gathers, bytes and gradient; not what the exercise asks."""
    model.set_reshard_after_forward(False)
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    F.mse_loss(model(x), y).backward()
    model.set_reshard_after_forward(True)
    optimizer.step()
    optimizer.zero_grad()


def divides_by_len_micro_batches(model, optimizer, micro_batches, k):
    """Divides each loss by len(micro_batches), every window's count, as section 2's one window did."""
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        model.set_requires_all_reduce((i + 1) % k == 0)
        (F.mse_loss(model(x), y) / n).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def never_zeroes_the_gradients(model, optimizer, micro_batches, k):
    """Right toggle and divisor, no zero_grad: each window adds to the previous windows' gradients."""
    for i, (x, y) in enumerate(micro_batches):
        model.set_requires_all_reduce((i + 1) % k == 0)
        (F.mse_loss(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()


def torch_chunk_indexed_by_rank(model, world_size, rank):
    """torch.chunk(p, W)[rank]: chunk returns fewer than W pieces for 6, 5 and 1 rows on 4 ranks."""
    local = 0
    for p in model.parameters():
        piece = torch.chunk(p.detach(), world_size, dim=0)[rank]
        local += piece.numel() * piece.element_size()
    return {"params": local, "grads": local, "optimizer": 2 * local}


def test_fewer_gathers_grader_asks_for_one_forward_per_micro_batch():
    graded_fail(
        exercises.check_fewer_gathers,
        one_forward_of_all_micro_batches,
        match=f"{FAILED}.*forwards of \\[6, 6\\] rows: one forward and backward per micro-batch",
    )


def test_hsdp_grader_names_a_division_by_len_micro_batches():
    text = graded_fail(exercises.check_hsdp_windows, divides_by_len_micro_batches, match=f"{FAILED}.*0.50 times it")
    assert "not len(micro_batches)" in text and "never reached" not in text, text


def test_hsdp_grader_names_gradients_carried_over():
    graded_fail(exercises.check_hsdp_windows, never_zeroes_the_gradients, match=f"{FAILED}.*carried over")


def test_rank_bytes_hint_explains_torch_chunks_missing_pieces():
    text = graded_fail(exercises.check_rank_bytes, torch_chunk_indexed_by_rank, match=f"{FAILED}.*IndexError")
    assert "torch.chunk and torch.tensor_split" in text, text


def test_not_attempted_lines_are_short_and_name_no_rule(capsys):
    exercises.check_rank_bytes(stub_rank_bytes)
    exercises.check_fewer_gathers(...)
    exercises.check_hsdp_windows(...)
    out = capsys.readouterr().out
    assert "Compare torch.chunk and torch.tensor_split" in out and "Try torch.chunk" not in out, out
    assert max(map(len, out.splitlines())) <= 130, out


def test_hsdp_grader_catches_gradient_sync_instead_of_the_all_reduce_toggle():
    graded_fail(exercises.check_hsdp_windows, gradient_sync_instead, match=f"{FAILED} .*reduce-scatters")


def test_hsdp_grader_names_a_missing_division_by_k():
    graded_fail(exercises.check_hsdp_windows, forgets_k, match=f"{FAILED} .*3 times too large")


def test_fewer_gathers_grader_grades_the_gradient_not_the_parameters():
    graded_fail(exercises.check_fewer_gathers, fewer_gathers_without_k, match=f"{FAILED} .*divide each")


def test_rank_bytes_grader_catches_even_shards():
    graded_fail(exercises.check_rank_bytes, even_shards, match=f"{FAILED}.*rank 0: predicted")


def test_rank_bytes_grader_catches_tensor_splits_rule():
    # measured on 4 ranks, first dims 6, 5, 1: 112 / 88 / 60 / 0 bytes of parameters; tensor_split's
    # rule says 112 / 60 / 44 / 44
    text = graded_fail(exercises.check_rank_bytes, tensor_split_rows, match=f"{FAILED}.*rank 1: predicted")
    assert "'params': 60" in text and "'params': 88" in text, text


def test_fewer_gathers_grader_catches_reshard_after_forward_left_off():
    text = graded_fail(
        exercises.check_fewer_gathers, reshard_after_forward_never_set_back, match=f"{FAILED}.*set back what you"
    )
    assert "2 all_gather_single" in text and "4 all_gather_single" in text, text  # 1 per block, not 2


def test_fewer_gathers_grader_catches_both_off_and_blocks_freed_by_hand():
    text = graded_fail(exercises.check_fewer_gathers, both_off_freed_by_hand, match=f"{FAILED}.*set back what you")
    assert "0 after the backward" in text, text  # a fresh model frees after its backward; this does not


def test_fewer_gathers_grader_catches_gathered_parameters_left_behind():
    graded_fail(exercises.check_fewer_gathers, never_reshards, match=f"{FAILED}.*still hold")


def test_stubs_are_not_attempted():
    assert exercises.check_hsdp_windows(...) == NOT_ATTEMPTED
    assert exercises.check_fewer_gathers(...) == NOT_ATTEMPTED
    assert exercises.check_rank_bytes(stub_rank_bytes) == NOT_ATTEMPTED  # raises before any launch
