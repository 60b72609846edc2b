"""The memory of one training step, measured part by part (what ``stepmem.predict`` predicts).

    got = measure_anatomy(model, batch, opt, accumulation=4)   # a stepmem.Anatomy, measured

``activations``: what ``SavedTensorMeter`` counts over one micro-batch's forward; ``temporaries``:
the allocator's peak over the whole step above its start (CUDA's, or ``cpu_peak``), less that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from lab_utils.data import micro_batches
from lab_utils.memory import CudaPeak, SavedTensorMeter, cpu_peak, tensor_bytes
from lab_utils.memory.stepmem import Anatomy

__all__ = ["measure_anatomy", "stepper"]


def stepper(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    *,
    accumulation: int = 1,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> tuple[list[dict[str, torch.Tensor]], Callable, Callable[[], None]]:
    """``(micro, loss, step)``: ``batch`` cut into ``accumulation`` micro-batches (by
    ``data.micro_batches``), ``loss(mb)`` (``model(**mb).loss`` under ``autocast()``) and ``step()``
    (every micro-batch, then the update)."""
    micro = [dict(zip(batch, mb)) for mb in micro_batches(*batch.values(), k=accumulation)]

    def loss(mb: dict[str, torch.Tensor]) -> torch.Tensor:
        with autocast():
            return model(**mb).loss

    def step() -> None:
        for mb in micro:
            (loss(mb) / accumulation).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    return micro, loss, step


def measure_anatomy(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    *,
    accumulation: int = 1,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> Anatomy:
    """One step of ``accumulation`` micro-batches then ``optimizer.step()``, measured part by part,
    after a first unmeasured step that allocates gradients and optimizer state (as in any loop)."""
    micro, loss_of, step = stepper(model, batch, optimizer, accumulation=accumulation, autocast=autocast)
    model.train()
    step()
    params = [p for p in model.parameters() if p.requires_grad]
    exclude = [v for mb in micro for v in mb.values()] + list(batch.values())
    with SavedTensorMeter(model, exclude=exclude) as meter:
        loss = loss_of(micro[0])
    del loss
    if params[0].is_cuda:
        with CudaPeak(params[0].device) as peak:
            step()
        top = peak.bytes
    else:
        top = cpu_peak(step)
    states = [v for st in optimizer.state.values() for v in st.values()]
    return Anatomy(
        weights=tensor_bytes(params),
        gradients=tensor_bytes(p.grad for p in params),
        optimizer=tensor_bytes(states),
        activations=meter.total_bytes,
        temporaries=top - meter.total_bytes,
    )
