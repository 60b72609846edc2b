"""The model, data and large-batch reference every run of lab 7 shares.

    model = workload.model(width=128, depth=4)              # float64 blocks, dims divisible by 4
    x, y = workload.dataset(n=64, width=128)
    ref = workload.large_batch_reference([(x, y)], width=128, depth=4, lr=1e-3)   # one process
    fwd_s, bwd_s = workload.compute_seconds(width=128, depth=4, batch=16, world_size=2)   # one micro-step

An update of ``world_size * k`` equal micro-batches (``data.micro_batches``) equals one step on
the whole batch when each micro-batch loss is divided by k (the reduce-scatter averages ranks).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils import models
from lab_utils.env import threads_per_rank
from lab_utils.flat import flat

__all__ = ["model", "dataset", "large_batch_reference", "compute_seconds"]


def model(width: int = 128, depth: int = 4) -> nn.Sequential:
    """``depth`` float64 blocks Linear(width, width) + GELU, seeded: every parameter's first dim is ``width``."""
    return models.mlp(width=width, depth=depth, seed=0, dtype=torch.float64)


def dataset(n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` seeded float64 random inputs and regression targets of size ``width``."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, width, generator=g, dtype=torch.float64)
    return x, torch.randn(n, width, generator=g, dtype=torch.float64)


def large_batch_reference(
    batches: list[tuple[torch.Tensor, torch.Tensor]], *, width: int, depth: int, lr: float
) -> torch.Tensor:
    """Flat parameters after one AdamW step per ``(x, y)`` batch, in one process, no sharding."""
    net = model(width, depth)
    opt = torch.optim.AdamW(net.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        F.mse_loss(net(x), y).backward()
        opt.step()
    return flat(net, dtype=torch.float64)


def compute_seconds(*, width: int, depth: int, batch: int, world_size: int, repeat: int = 5) -> tuple[float, float]:
    """Measured seconds of one forward and of its backward through the whole (unsharded) model on
    a micro-batch of ``batch`` samples in this process, on the threads each rank of a
    ``world_size`` launch gets: the fastest of ``repeat`` runs after a warm-up (what the work costs
    when nothing else on the machine interrupts it), the compute a modelled link can hide behind."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat}: need at least one timed run")
    net = model(width, depth)
    x, y = dataset(batch, width)
    forward, backward = [], []
    threads = torch.get_num_threads()
    torch.set_num_threads(threads_per_rank(world_size))  # as each rank of the launch computes
    try:
        for i in range(repeat + 1):  # the first run warms up
            t0 = time.perf_counter()
            loss = F.mse_loss(net(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            if i:
                forward.append(t1 - t0)
                backward.append(t2 - t1)
    finally:
        torch.set_num_threads(threads)
    return min(forward), min(backward)
