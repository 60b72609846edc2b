"""PackCounter: what save_on_cpu moves is what autograd would keep, the weights it copies too."""

import pytest
import torch
from torch.autograd.graph import save_on_cpu

from lab_utils.labs.lab01_checkpointing.offload import PackCounter
from lab_utils.memory import SavedTensorMeter
from lab_utils.models import mlp


def test_offload_moves_what_autograd_keeps_and_the_weights():
    model, x = mlp(width=16, depth=3, seed=0), torch.randn(4, 16)
    with SavedTensorMeter(model, exclude=[x]) as meter:
        model(x)
    with PackCounter(save_on_cpu(), params=model.parameters(), exclude=[x]) as moved:
        y = model(x)
    y.sum().backward()
    assert moved.activation_bytes == meter.total_bytes > 0
    # blocks 2 and 3 save their weight (for the gradient of their input): copied as well; block 1
    # does not (its input, the batch, needs no gradient)
    assert moved.param_bytes == 2 * 16 * 16 * 4
    assert all(p.grad is not None for p in model.parameters())


def test_pack_counter_needs_saved_tensor_hooks():
    with pytest.raises(TypeError, match="saved_tensors_hooks"):
        PackCounter(object())
