"""flat: one vector of many tensors; mean_over_ranks: one all_reduce for them all (2 real ranks)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lab_utils import launch
from lab_utils.comm import CommCounter
from lab_utils.flat import flat, mean_over_ranks

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_flat_takes_parameters_or_gradients_in_order():
    a, b = nn.Linear(3, 2), nn.Linear(2, 1)
    want = torch.cat([p.detach().reshape(-1) for p in [*a.parameters(), *b.parameters()]])
    assert torch.equal(flat([a, b]), want) and torch.equal(flat(list(a.parameters()) + list(b.parameters())), want)
    got = flat(a, dtype=torch.float64)
    assert got.dtype == torch.float64 and got.device.type == "cpu" and not got.requires_grad
    a(torch.ones(1, 3)).sum().backward()
    grads = flat([a, b], grads=True)
    assert torch.equal(grads[:8], torch.cat([a.weight.grad.reshape(-1), a.bias.grad]))
    assert torch.equal(grads[8:], torch.zeros(3))  # b has no gradient yet: zeros, same length
    with pytest.raises(TypeError, match="module, modules or tensors"):
        flat([a, 3])


def _average_on_rank() -> dict:
    import torch.distributed as dist

    rank = dist.get_rank()
    tensors = [torch.full((2, 3), float(rank)), torch.full((4,), 10.0 * rank)]
    counter = CommCounter()
    with counter.track():
        mean_over_ranks(tensors)
    return {"tensors": tensors, "collectives": counter.summary()["collectives"]}


def test_mean_over_ranks_is_one_collective():
    for r in launch(_average_on_rank, world_size=2):
        assert r["collectives"] == 1
        assert torch.equal(r["tensors"][0], torch.full((2, 3), 0.5)) and torch.equal(
            r["tensors"][1], torch.full((4,), 5.0)
        )
