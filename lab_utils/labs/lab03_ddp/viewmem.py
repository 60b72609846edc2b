"""What ``gradient_as_bucket_view=True`` saves, measured by the allocator in a real DDP step.

    off, on = launch(viewmem.measure, 2)[0]
    off.peak_bytes - on.peak_bytes       # about one copy of the gradients (off.grad_bytes)

One update after two (so DDP has rebuilt its buckets), from gradients set to None. Allocator
bytes (the profiler's allocation events on CPU, ``max_memory_allocated`` on a GPU), not resident
memory, so the same step gives the same number every time. Off, the backward allocates every
``.grad`` and DDP copies it into its bucket; on, each ``.grad`` is a view into its bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lab_utils.env import dist_info
from lab_utils.labs.lab03_ddp.workload import DEFAULT, Setup, dataset, model, param_bytes, wrap
from lab_utils.memory import CudaPeak, cpu_levels

__all__ = ["StepMemory", "step_memory", "measure"]


@dataclass(frozen=True)
class StepMemory:
    """One measured update: the allocator's peak above the level at its start, the bytes still
    allocated after it (the gradients it leaves), and the parameters' bytes (one gradient copy)."""

    gradient_as_bucket_view: bool
    device: str
    peak_bytes: int
    kept_bytes: int
    grad_bytes: int


def step_memory(flag: bool, setup: Setup = DEFAULT, cap_mb: float = 0.25) -> StepMemory:
    """On this rank: one DDP update's allocator peak with ``gradient_as_bucket_view=flag``."""
    info = dist_info()
    ddp = wrap(model(setup), cap_mb, gradient_as_bucket_view=flag)
    opt = torch.optim.SGD(ddp.parameters(), lr=setup.lr)
    x, y = (t.to(info.device) for t in dataset(setup.micro_batch, setup))

    def update() -> None:
        F.mse_loss(ddp(x), y).backward()
        opt.step()

    for _ in range(2):  # DDP rebuilds its buckets after the first backward
        opt.zero_grad()
        update()
    opt.zero_grad()  # set_to_none: the measured update starts with no gradients
    if info.device.type == "cuda":
        base = torch.cuda.memory_allocated(info.device)
        with CudaPeak(info.device) as cuda:
            update()
        peak, kept = cuda.bytes, torch.cuda.memory_allocated(info.device) - base
    else:
        peak, kept = cpu_levels(update)
    return StepMemory(flag, info.device.type, int(peak), int(kept), sum(param_bytes(ddp.module)))


def measure(setup: Setup = DEFAULT, cap_mb: float = 0.25) -> tuple[StepMemory, StepMemory]:
    """The flag off, then on (call on every rank)."""
    return step_memory(False, setup, cap_mb), step_memory(True, setup, cap_mb)
