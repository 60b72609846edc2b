"""workload: the reference is one large-batch AdamW step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lab_utils.flat import flat
from lab_utils.labs.lab07_fsdp import workload


def test_reference_is_adamw_on_the_whole_batch():
    x, y = workload.dataset(8, 4)
    got = workload.large_batch_reference([(x, y)], width=4, depth=2, lr=0.1)
    net = workload.model(4, 2)
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    F.mse_loss(net(x), y).backward()
    opt.step()
    assert torch.equal(got, flat(net))
    assert not torch.equal(got, flat(workload.model(4, 2)))  # it did train


def test_compute_seconds_are_measured_and_grow_with_the_batch():
    threads = torch.get_num_threads()
    small = workload.compute_seconds(width=64, depth=2, batch=8, world_size=2, repeat=2)
    big = workload.compute_seconds(width=64, depth=2, batch=1024, world_size=2, repeat=2)
    assert all(s > 0 for s in small) and big[0] > small[0] and big[1] > small[1]
    assert torch.get_num_threads() == threads  # one thread while measuring, restored after
    with pytest.raises(ValueError, match="repeat=0"):
        workload.compute_seconds(width=4, depth=1, batch=2, world_size=2, repeat=0)
