"""One data-parallel step as the ZeRO paper's stages 1 and 2 move it: reduce-scatter, step a slice, all-gather.

    with counter.track():
        zero.paper_step(model, x, y, lr=1e-3)   # on every rank: the same model, its own slice of the batch

Unlike ``ZeroRedundancyOptimizer`` (DDP's all-reduce, then a broadcast of each rank's stepped
parameters), this moves exactly one all-reduce's bytes on a ring. Each call builds a fresh AdamW
and drops it: one call matches DDP + AdamW's first step only, not a run of steps (the moments are
not kept).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lab_utils.env import dist_info
from lab_utils.flat import flat

__all__ = ["paper_step"]


def paper_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float) -> None:
    """One AdamW step of ``model`` (replicated on every rank) on this rank's ``(x, y)``: backward,
    reduce-scatter of the flat gradient (the mean over ranks of this rank's slice), AdamW on the
    slice, all-gather of the updated slices into every rank's parameters. Needs the number of
    parameter elements to divide by the world size."""
    me = dist_info()
    world, rank = me.world_size, me.rank
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    if n % world:
        raise ValueError(f"{n} parameter elements do not divide by world_size={world}: use a model whose size does")
    model.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()
    flat_grad = flat(params, grads=True, device=None)
    chunk = n // world
    mine = torch.empty(chunk, dtype=flat_grad.dtype, device=flat_grad.device)
    dist.reduce_scatter_single(mine, flat_grad)  # a sum: each rank gets its slice only
    mine /= world
    flat_params = flat(params, device=None)
    slice_ = nn.Parameter(flat_params[rank * chunk : (rank + 1) * chunk].clone())
    slice_.grad = mine
    torch.optim.AdamW([slice_], lr=lr).step()  # 2 x chunk elements of state on this rank, this call only
    gathered = torch.empty(n, dtype=flat_params.dtype, device=flat_params.device)
    dist.all_gather_single(gathered, slice_.detach())
    with torch.no_grad():
        offset = 0
        for p in params:
            p.copy_(gathered[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
