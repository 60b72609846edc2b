"""Forward-call and FLOP counters against FLOPs of Linear layers computed by hand (2*m*n*k)."""

import torch
from torch import nn

from lab_utils.env import in_backward
from lab_utils.memory.recompute import count_flops, measure_recompute
from lab_utils.models import mlp
from tests.helpers.chains import forward_every_block, forward_sequential

B, W, N = 8, 32, 4


def linear_flops(b, i, o):
    return 2 * b * i * o


def test_flops_of_a_linear_chain_by_phase():
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8))
    x = torch.randn(4, 16)  # the batch needs no gradient
    rep = measure_recompute(model, lambda: model(x).sum())
    fwd = linear_flops(4, 16, 32) + linear_flops(4, 32, 8)
    assert rep.forward_flops == fwd
    # backward: weight grads of both layers + input grad of the second layer only
    assert rep.backward_flops == fwd + linear_flops(4, 32, 8)
    assert count_flops(lambda: model(x)) == fwd
    assert rep.n_recomputed_calls == 0 and not in_backward()


def test_every_block_checkpointed_recomputes_one_forward():
    model, x = mlp(width=W, depth=N), torch.randn(B, W)
    base = measure_recompute(model, lambda: model(x).sum())
    ck = measure_recompute(model, lambda: forward_every_block(model, x).sum())
    assert ck.forward_flops == base.forward_flops == N * linear_flops(B, W, W)
    assert ck.total_flops - base.total_flops == base.forward_flops
    for i in range(N):
        assert ck.calls.forward[f"{i}.linear"] == 1 and ck.calls.recomputed[f"{i}.linear"] == 1
    assert base.calls.recomputed_modules() == []


def test_checkpoint_sequential_skips_the_last_chunk():
    model, x = mlp(width=W, depth=N), torch.randn(B, W)
    base = measure_recompute(model, lambda: model(x).sum())
    ck = measure_recompute(model, lambda: forward_sequential(model, x, k=2).sum())
    assert ck.total_flops - base.total_flops == 2 * linear_flops(B, W, W)
    assert sorted(ck.calls.recomputed_modules()) == ["0.act", "0.linear", "1.act", "1.linear"]
