"""The large-batch reference that accumulation imitates: what the exercise graders compare with.

Each window of ``k`` micro-batches is concatenated into one batch: one forward, one backward, one
step on its mean loss. The lab's ``large_batch`` cell is checked equal to this copy
(``tests/labs/lab02_accumulation/test_reference.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from lab_utils.labs.lab02_accumulation.losses import count_items
from lab_utils.labs.lab02_accumulation.windowing import Batch, concat_batches, windows

__all__ = ["LossSum", "Items", "large_batch_grads", "train_large_batch"]

LossSum = Callable[[nn.Module, Batch], torch.Tensor]
Items = Callable[[Batch], int]


def large_batch_grads(
    model: nn.Module, micro_batches: Sequence[Batch], *, loss_sum: LossSum, items: Items = count_items
) -> list[torch.Tensor]:
    """Gradients of the mean loss over all ``micro_batches`` taken as one batch (``.grad`` untouched)."""
    big = concat_batches(list(micro_batches))
    params = [p for p in model.parameters() if p.requires_grad]
    return list(torch.autograd.grad(loss_sum(model, big) / items(big), params))


def train_large_batch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: Sequence[Batch],
    k: int,
    *,
    loss_sum: LossSum,
    items: Items = count_items,
    max_norm: float | None = None,
    exact_clip: bool = False,
) -> list[float]:
    """One step per window of ``k`` micro-batches taken as one batch (the last may be short), clipped
    to ``max_norm`` if given; returns each update's gradient norm before clipping.

    Clipping is ``clip_grad_norm_``'s, whose factor ``max_norm / (norm + 1e-6)`` leaves a clipped
    gradient a little shorter than ``max_norm``; ``exact_clip`` scales it to ``max_norm`` exactly,
    as a clip written by hand does (``min(1, max_norm / norm)``)."""
    norms = []
    for window in windows(micro_batches, k):
        big = concat_batches(window)
        optimizer.zero_grad(set_to_none=True)
        (loss_sum(model, big) / items(big)).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())
        if max_norm is not None and exact_clip:
            for g in grads:
                g.mul_(min(1.0, max_norm / norms[-1]))
        elif max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norms
