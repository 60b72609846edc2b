"""Many tensors as one flat vector: to compare runs, to send a result back from a rank, or to
average every parameter over the ranks in one collective.

    from lab_utils.flat import flat, mean_over_ranks
    flat(model)                                   # every parameter in one 1-D CPU tensor
    flat([stage0, stage1], grads=True)            # every gradient of both (zeros where there is none)
    mean_over_ranks(model.parameters())           # on a rank: each tensor := its mean over the ranks

Sharded parameters (FSDP2's DTensors) are gathered first, so under FSDP ``flat`` is a
collective: call it on every rank.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.env import dist_info

__all__ = ["flat", "mean_over_ranks"]


def flat(
    source: nn.Module | Iterable[nn.Module | torch.Tensor],
    *,
    grads: bool = False,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = "cpu",
) -> torch.Tensor:
    """Every parameter of ``source`` (a module, or modules and tensors), in ``parameters()``
    order, in one detached 1-D tensor; ``grads=True`` takes their gradients (zeros for a parameter
    without one). ``dtype`` converts (None keeps it); ``device`` is where the result lives (the
    CPU by default, so it can travel back from a rank; None leaves it where it is)."""
    tensors: list[torch.Tensor] = []
    for item in [source] if isinstance(source, nn.Module) else source:
        if not isinstance(item, nn.Module | torch.Tensor):
            raise TypeError(f"flat takes a module, modules or tensors, got a {type(item).__name__}")
        tensors.extend(item.parameters() if isinstance(item, nn.Module) else [item])
    if not tensors:
        raise ValueError("flat: source has no parameters")
    parts = [(p.grad if p.grad is not None else torch.zeros_like(p)) if grads else p for p in tensors]
    out = torch.cat([(t.full_tensor() if hasattr(t, "full_tensor") else t).detach().reshape(-1) for t in parts])
    out = out if dtype is None else out.to(dtype)
    return out if device is None else out.to(device)


def mean_over_ranks(tensors: Iterable[torch.Tensor]) -> None:
    """Replace each tensor, in place, by its mean over the ranks, with one all_reduce of one flat
    buffer (not one collective per tensor). Call it on every rank."""
    tensors = list(tensors)
    buf = flat(tensors, device=None)
    dist.all_reduce(buf)
    buf /= dist_info().world_size
    with torch.no_grad():
        for t, part in zip(tensors, buf.split([t.numel() for t in tensors])):
            t.copy_(part.view_as(t))
