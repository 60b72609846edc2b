"""The core meters on lab 1's selective chain: the cache its policy keeps is counted, and the
recompute skips the matmuls (their outputs come from the cache)."""

import torch

from lab_utils.labs.lab01_checkpointing.schedules import segments_checkpoint_sequential
from lab_utils.memory import SavedTensorMeter
from lab_utils.memory.recompute import measure_recompute
from lab_utils.models import mlp
from tests.labs.lab01_checkpointing.chains import forward_selective

B, W, N, F32 = 8, 32, 4, 4


def chain():
    return mlp(width=W, depth=N), torch.randn(B, W)


def test_checkpoint_sequential_segments():
    assert segments_checkpoint_sequential(N, 2) == [(0, 2, "full"), (2, 4, "store")]


def test_selective_recomputes_pointwise_only():
    model, x = mlp(width=W, depth=N), torch.randn(B, W)
    base = measure_recompute(model, lambda: model(x).sum())
    sel = measure_recompute(model, lambda: forward_selective(model, x).sum())
    assert sel.total_flops == base.total_flops  # matmul outputs come from the cache
    assert sel.calls.recomputed[f"{N - 1}.act"] == 1  # but the blocks did run again


def test_selective_cache_is_counted():
    # Saving matmul outputs in an MLP block keeps the same two tensors as no checkpointing:
    # the block input (region input) and the Linear output (selective cache; GELU's input).
    model, x = chain()
    with SavedTensorMeter(model) as m:
        forward_selective(model, x).sum()
    assert m.total_bytes == 2 * N * B * W * F32
    assert sum(r.source == "selective cache" for r in m.records) == N
