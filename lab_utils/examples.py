"""Small distributed functions used by the setup check, the tests and the torchrun examples.

They read their rank from ``torch.distributed``, so each runs under ``lab_utils.launch`` and
under ``torchrun -m lab_utils.run lab_utils.examples:<name>`` alike.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils.checks import fingerprint
from lab_utils.data import regression

__all__ = ["allreduce_demo", "whoami", "ddp_regression"]


def allreduce_demo(n: int = 4) -> dict:
    """Each rank contributes ``rank + 1`` in ``n`` elements; everyone gets the sum."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.full((n,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    return {
        "rank": rank,
        "world_size": world,
        "sum": t[0].item(),
        "expected": world * (world + 1) / 2,
        "backend": dist.get_backend(),
    }


def whoami() -> dict:
    """Rank, local rank, host and process id (to see where each rank ran)."""
    info = {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "local_rank": int(os.environ.get("LOCAL_RANK", dist.get_rank())),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, info)
    return {"ranks": out}


def ddp_regression(steps: int = 5, batch: int = 16, dim: int = 8, seed: int = 0) -> dict:
    """A few DDP steps on a linear regression; returns the final loss and a parameter fingerprint
    (equal on every rank after DDP's gradient all-reduce)."""
    rank, world = dist.get_rank(), dist.get_world_size()
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
