"""The allocation timeline against bytes known by hand."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from lab_utils.labs.lab01_checkpointing.alloc_timeline import allocation_timeline
from lab_utils.models import mlp


def test_timeline_sees_the_forward_keep_and_the_backward_free():
    model, x = mlp(width=64, depth=4, seed=0), torch.randn(32, 64)
    unit = 32 * 64 * 4
    plain = allocation_timeline(lambda: model(x).pow(2).mean())
    # after the forward: each block's Linear output and GELU output (the last GELU's is the chain's
    # output, kept by pow), pow's output and the loss; the batch was allocated before
    assert plain.live[plain.backward_at - 1] >= 2 * 4 * unit  # allocated when backward starts
    grads = sum(p.numel() * 4 for p in model.parameters())
    assert max(plain.live[plain.backward_at :]) == plain.peak and plain.live[-1] == grads  # what stays: the .grads
    model.zero_grad(set_to_none=True)
    ckpt = allocation_timeline(lambda: checkpoint(model, x, use_reentrant=False).pow(2).mean())
    assert ckpt.live[ckpt.backward_at - 1] < 2 * unit + 4096  # only the output and pow's
    assert grads + 2 * unit < ckpt.peak < plain.peak  # the chain rebuilt in backward, its grads made
    with pytest.raises(ValueError, match="only 'cpu' and 'cuda'"):
        allocation_timeline(lambda: model(x).sum(), device="meta")
