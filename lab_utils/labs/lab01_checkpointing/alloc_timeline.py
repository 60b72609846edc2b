"""Allocated bytes through one training step, from the allocator's own events.

    tl = allocation_timeline(lambda: model(x).pow(2).mean(), device=x.device)
    tl.live, tl.backward_at, tl.peak

The x axis is the event's rank, not its clock time: the order of allocations repeats, the clock does not.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from lab_utils.env import quiet_native_output

__all__ = ["Timeline", "allocation_timeline"]

_MARK = "lab_utils:backward"


@dataclass(frozen=True)
class Timeline:
    """Bytes allocated (above the start) after each allocator event of one step."""

    live: tuple[int, ...]
    backward_at: int

    @property
    def peak(self) -> int:
        return max(self.live, default=0)


def allocation_timeline(loss_fn: Callable[[], torch.Tensor], device: torch.device | str = "cpu") -> Timeline:
    """Run ``loss_fn()`` (a forward that returns a scalar loss) and its backward under the
    profiler; return the allocated bytes after each allocator event of ``device``'s type."""
    dev = torch.device(device)
    kind = torch.autograd.DeviceType.CUDA if dev.type == "cuda" else torch.autograd.DeviceType.CPU
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"allocation_timeline(device={device!r}): only 'cpu' and 'cuda' have allocator events")
    # No garbage collection inside the window: a cycle left by earlier code, freed there, would be
    # counted as a free of this step's bytes (seen once in the test suite beside other tests).
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with quiet_native_output():
            with profile(activities=activities, profile_memory=True) as prof:
                loss = loss_fn()
                with record_function(_MARK):
                    loss.backward()
                del loss
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
    finally:
        if was_enabled:
            gc.enable()
    events = list(prof.profiler.kineto_results.events())
    marks = [e.start_ns() for e in events if e.name() == _MARK]
    if not marks:
        raise RuntimeError("allocation_timeline: the profiler recorded no backward mark; is the profiler disabled?")
    mem = sorted((e for e in events if e.name() == "[memory]" and e.device_type() == kind), key=lambda e: e.start_ns())
    live, total, backward_at = [], 0, None
    for e in mem:
        if backward_at is None and e.start_ns() >= marks[0]:
            backward_at = len(live)
        total += e.nbytes()
        live.append(total)
    return Timeline(tuple(live), len(live) if backward_at is None else backward_at)
