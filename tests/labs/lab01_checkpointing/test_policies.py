"""counted(policy): what a selective policy caches reaches the memory meter; decisions unchanged."""

import functools

import pytest
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from lab_utils.labs.lab01_checkpointing.policies import counted, op_census, selective_policy
from lab_utils.memory import SavedTensorMeter
from lab_utils.models import mlp, transformer_chain

B, W = 4, 16
F32 = 4


def kept(policy):
    model, x = mlp(width=W, depth=1, seed=0), torch.randn(B, W, requires_grad=True)
    ctx = functools.partial(create_selective_checkpoint_contexts, policy)
    with SavedTensorMeter(model) as m:
        y = checkpoint(model, x, use_reentrant=False, context_fn=ctx)
    y.sum().backward()
    return m


def test_the_cache_is_invisible_to_hooks_without_counted():
    # the region keeps its input x; the cached Linear output lives in the policy's storage
    assert kept(selective_policy()).total_bytes == B * W * F32


def test_counted_reports_what_the_policy_saves():
    m = kept(counted(selective_policy()))
    assert m.total_bytes == 2 * B * W * F32
    assert [r.source for r in m.records if r.nbytes].count("selective cache") == 1


def test_counted_reports_nothing_when_the_policy_saves_nothing():
    assert kept(counted(selective_policy(save_ops=()))).total_bytes == B * W * F32


def test_counted_rejects_a_non_function():
    with pytest.raises(TypeError, match="policy must be a function"):
        counted("save matmuls")


def test_op_census_scores_products_with_a_weight_above_the_attention_scores():
    from lab_utils.labs.lab01_checkpointing.policies import CensusRow, op_census
    from lab_utils.models import transformer_chain

    rows = op_census(transformer_chain(1, d_model=32, n_heads=4, seed=0)[0], torch.randn(2, 64, 32))
    assert all(type(r) is CensusRow for r in rows)
    scores = rows[0]  # the biggest output: b * heads * seq * seq floats
    assert scores.op == "aten.bmm.default" and scores.out_bytes == 2 * 4 * 64 * 64 * 4
    linear = [r for r in rows if r.op == "aten.addmm.default"]
    assert len(linear) == 4 and min(r.flops_per_byte for r in linear) > scores.flops_per_byte > 0
    assert any(r.op == "aten._softmax.default" and r.flops == 0 for r in rows)


def test_op_census_keys_tell_a_blocks_products_apart():
    rows = [r for r in op_census(transformer_chain(1, d_model=32)[0], torch.randn(2, 16, 32)) if r.flops]
    assert len(rows) == 6  # qkv, scores, values, proj, fc, fc_out
    assert len({r.key for r in rows}) == 6


def test_op_census_marks_what_backward_saves():
    # softmax keeps its output, fc's output is GELU's input, the scores' bmm output and fc_out's
    # output are saved by nobody (the scale, a multiplication by a number, needs none)
    rows = op_census(transformer_chain(1, d_model=32, n_heads=4, seed=0)[0], torch.randn(2, 24, 32))
    saved = {(r.op, r.out_shape): r.saved_for_backward for r in rows}
    assert saved[("aten._softmax.default", (2, 4, 24, 24))] is True
    assert saved[("aten.addmm.default", (48, 128))] is True  # fc -> GELU
    assert saved[("aten.bmm.default", (8, 24, 24))] is False  # QK^T, scaled next
    assert saved[("aten.addmm.default", (48, 32))] is False  # proj and fc_out: added to the residual
    with pytest.raises(TypeError, match="a module and a tensor"):
        op_census(lambda x: x, torch.ones(1))
