"""Small distributed functions for the README's torchrun examples and the launch tests.

They read their rank from ``torch.distributed``, so each runs under ``lab_utils.launch`` and
under ``torchrun -m lab_utils.launcher.torchrun lab_utils.launcher.examples:<name>`` alike.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils.checks import fingerprint
from lab_utils.data import regression
from lab_utils.env import dist_info

__all__ = ["allreduce_demo", "ddp_regression"]


def allreduce_demo(n: int = 4) -> dict:
    """Each rank contributes ``rank + 1`` in ``n`` elements; everyone gets the sum."""
    me = dist_info()
    rank, world = me.rank, me.world_size
    t = torch.full((n,), float(rank + 1), device=me.device)
    dist.all_reduce(t)
    return {
        "rank": rank,
        "world_size": world,
        "sum": t[0].item(),
        "expected": world * (world + 1) / 2,
        "backend": me.backend,
    }


def ddp_regression(steps: int = 5, batch: int = 16, dim: int = 8, seed: int = 0) -> dict:
    """A few DDP steps on a linear regression; returns the final loss and a parameter fingerprint
    (equal on every rank after DDP's gradient all-reduce)."""
    me = dist_info()
    rank, world = me.rank, me.world_size
    torch.manual_seed(seed)
    model = torch.nn.Linear(dim, 1)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x, y = regression(n=batch * world * steps, dim=dim, seed=seed)
    loss = torch.tensor(0.0)
    for s in range(steps):
        lo = (s * world + rank) * batch
        loss = torch.nn.functional.mse_loss(ddp(x[lo : lo + batch]), y[lo : lo + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    digest = fingerprint(model)
    del ddp, model, opt
    return {"rank": rank, "loss": loss.item(), "fingerprint": digest}
