"""Many tensors as one flat vector: to compare two runs, to send a result back from a rank, or to
average every parameter over the ranks with one collective.

    from lab_utils.flat import flat, mean_over_ranks
    flat(model)                              # every parameter in one 1-D CPU tensor
    flat(model, grads=True)                  # every gradient (zeros where a parameter has none)
    flat([stage0, stage1], dtype=torch.float64)   # several modules, in order, as float64
    mean_over_ranks(list(model.parameters()))     # on a rank: each tensor := its mean over the ranks

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


def _tensors(source: nn.Module | Iterable[nn.Module] | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    items = [source] if isinstance(source, nn.Module) else list(source)
    out: list[torch.Tensor] = []
    for item in items:
        if isinstance(item, nn.Module):
            out.extend(item.parameters())
        elif isinstance(item, torch.Tensor):
            out.append(item)
        else:
            raise TypeError(f"flat takes a module, modules or tensors, got a {type(item).__name__}")
    return out


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t  # a DTensor shard -> the whole tensor


def flat(
    source: nn.Module | Iterable[nn.Module] | Iterable[torch.Tensor],
    *,
    grads: bool = False,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = "cpu",
) -> torch.Tensor:
    """Every parameter of ``source`` (a module, several modules, or tensors), in ``parameters()``
    order, in one detached 1-D tensor; ``grads=True`` takes their gradients instead (zeros for a
    parameter without one). ``dtype`` converts (None keeps it); ``device`` is where the result
    lives (CPU by default, so it can travel back from a rank; None leaves it where it is)."""
    parts = []
    for p in _tensors(source):
        t = (p.grad if p.grad is not None else torch.zeros_like(p)) if grads else p
        parts.append(_full(t).detach().reshape(-1))
    if not parts:
        raise ValueError("flat: source has no parameters")
    out = torch.cat(parts)
    if dtype is not None:
        out = out.to(dtype)
    return out if device is None else out.to(device)


def mean_over_ranks(tensors: Iterable[torch.Tensor]) -> None:
    """Replace each tensor, in place, by its mean over the ranks, with one all_reduce of one flat
    buffer (not one collective per tensor). Call it on every rank of a process group."""
    tensors = list(tensors)
    buf = flat(tensors, device=None)
    dist.all_reduce(buf)
    buf /= dist_info().world_size
    with torch.no_grad():
        offset = 0
        for t in tensors:
            t.copy_(buf[offset : offset + t.numel()].view_as(t))
            offset += t.numel()
