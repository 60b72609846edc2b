"""DDP's settings, measured on every rank: first-iteration buckets, the unused-parameter search,
gradients as bucket views and what they save in memory, compression hooks and the buffer
broadcast behind ``require_forward_param_sync``.

    from lab_utils import launch
    from lab_utils.labs.lab03_ddp import settings
    got = launch(settings.measure, 2)[0]             # a Settings
    got.buckets["find_unused_parameters=True"]       # all-reduces of backward 1, 2, 3
    got.bucket_view                                  # gradient bytes held outside DDP's buckets
    got.step_memory                                  # (off, on): one update's allocator bytes
    off, on = launch(settings.view_memory, 2)[0]     # the same alone, at any Setup
    got.hooks["PowerSGD rank 1"]                     # a HookRun (or Refused): bytes, distance
    got.buffers                                      # which forwards broadcast rank 0's buffers

Each measurement is the plain DDP call with one instrument attached from outside: a counting comm
hook (``CommCounter``), the profiler (the reducer's own ``search_unused_parameters`` record), the
storages behind ``.grad`` and a spy on ``DDP._sync_buffers``.

What ``gradient_as_bucket_view=True`` saves (``view_memory``): one update after two (so DDP has
rebuilt its buckets), from gradients set to None. Allocator bytes (the profiler's allocation
events on CPU, ``max_memory_allocated`` on a GPU), not resident memory, so the same step gives the
same number every time. Off, the backward allocates every ``.grad`` and DDP copies it into its
bucket; on, each ``.grad`` is a view into its bucket: ``off.peak_bytes - on.peak_bytes`` is about
one copy of the gradients (``off.grad_bytes``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from lab_utils.checks import fingerprint
from lab_utils.comm import CommCounter
from lab_utils.env import dist_info
from lab_utils.flat import flat
from lab_utils.labs.lab03_ddp.reducer import quiet_profile
from lab_utils.labs.lab03_ddp.workload import DEFAULT, Setup, dataset, hooked_steps, model, param_bytes, wrap
from lab_utils.memory import CudaPeak, cpu_levels, nbytes

__all__ = [
    "Settings",
    "BucketView",
    "HookRun",
    "Refused",
    "BufferForward",
    "StepMemory",
    "CONFIGS",
    "HOOKS",
    "SEARCH_EVENT",
    "measure",
    "first_buckets",
    "search_cost",
    "bucket_view",
    "step_memory",
    "view_memory",
    "hooks",
    "buffers",
]

CONFIGS: dict[str, dict[str, bool]] = {
    "find_unused_parameters=False": {},
    "find_unused_parameters=True": {"find_unused_parameters": True},
    "static_graph=True": {"static_graph": True},
}
"""The DDP keyword arguments whose first-iteration buckets ``first_buckets`` compares."""

SEARCH_EVENT = "torch.distributed.ddp.reducer::search_unused_parameters"
"""The profiler record of the reducer's graph traversal (torch/csrc/distributed/c10d/reducer.cpp)."""


@dataclass(frozen=True)
class BucketView:
    """Where one run's gradients live: ``.grad`` bytes outside DDP's bucket buffers, the bytes of
    the buffers the comm hook was handed, and how many storages the ``.grad`` tensors use."""

    outside_buckets: int
    bucket_buffers: int
    grad_storages: int


@dataclass(frozen=True)
class HookRun:
    """What one comm hook sent (bytes per update, dtypes) and did: the parameters' largest distance
    to the float32 all-reduce run, and whether the ranks hold the same parameters."""

    bytes_per_update: list[int]
    dtypes: list[str]
    max_diff: float
    ranks_agree: bool


@dataclass(frozen=True)
class Refused:
    """A comm hook DDP would not register on this backend, with DDP's message."""

    message: str


@dataclass(frozen=True)
class BufferForward:
    """One forward of ``buffers``: inside ``no_sync``?, ``require_forward_param_sync`` before it,
    whether it broadcast rank 0's buffers, the flag after it."""

    no_sync: bool
    flag_before: bool
    broadcast: bool
    flag_after: bool


@dataclass(frozen=True)
class StepMemory:
    """One measured update: the allocator's peak above the level at its start, the bytes still
    allocated after it (the gradients it leaves), and the parameters' bytes (one gradient copy)."""

    gradient_as_bucket_view: bool
    device: str
    peak_bytes: int
    kept_bytes: int
    grad_bytes: int


@dataclass(frozen=True)
class Settings:
    """Every measurement of ``measure`` on one rank (``cap_mb``: the bucket cap they used)."""

    cap_mb: float
    buckets: dict[str, list[int]]
    search_us: dict[str, float]
    bucket_view: dict[str, BucketView]
    step_memory: tuple[StepMemory, StepMemory]
    hooks: dict[str, HookRun | Refused]
    buffers: list[BufferForward]
    param_bytes: int


def first_buckets(cap_mb: float, steps: int = 3, setup: Setup = DEFAULT) -> dict[str, list[int]]:
    """All-reduces of each of ``steps`` backwards for each of ``CONFIGS`` (every rank)."""
    info, out = dist_info(), {}
    g = torch.Generator().manual_seed(300 + info.rank)
    for name, kwargs in CONFIGS.items():
        ddp = wrap(model(setup), cap_mb, **kwargs)
        counter = CommCounter().attach(ddp)
        for _ in range(steps):
            ddp(torch.randn(setup.micro_batch, setup.dim, generator=g).to(info.device)).pow(2).mean().backward()
            counter.mark_step()
        out[name] = [p["collectives"] for p in counter.summary()["per_step"]]
        del ddp, counter
    return out


def search_cost(repeats: int = 5, setup: Setup = DEFAULT) -> dict[str, float]:
    """Microseconds per forward of the reducer's unused-parameter search (profiler record), the
    fastest of ``repeats`` synchronised steps, with ``find_unused_parameters`` True and False."""
    info, out = dist_info(), {}
    x = torch.randn(setup.micro_batch, setup.dim).to(info.device)
    for flag in (False, True):
        ddp = wrap(model(setup), 25, find_unused_parameters=flag)
        ddp(x).pow(2).mean().backward()  # warm-up
        best = float("inf")
        for _ in range(repeats):
            with quiet_profile() as prof:
                ddp(x).pow(2).mean().backward()
            best = min(best, sum(e.cpu_time_total for e in prof.function_events if e.name == SEARCH_EVENT))
        out[f"find_unused_parameters={flag}"] = best
        del ddp
    return out


def _bucket_storages(state: dict[int, int], bucket):
    buf = bucket.buffer()
    state[buf.untyped_storage().data_ptr()] = buf.numel() * buf.element_size()
    return default_hooks.allreduce_hook(None, bucket)


def bucket_view(setup: Setup = DEFAULT) -> dict[str, BucketView]:
    """For ``gradient_as_bucket_view`` False and True, after two steps (the buckets rebuilt): the
    bytes of ``.grad`` storages that are not DDP's bucket buffers, and the bucket buffers' bytes
    (summed over the buffers the comm hook was handed in the second backward)."""
    info, out = dist_info(), {}
    x = torch.randn(setup.micro_batch, setup.dim).to(info.device)
    for flag in (False, True):
        ddp = wrap(model(setup), 0.25, gradient_as_bucket_view=flag)
        seen: dict[int, int] = {}
        ddp.register_comm_hook(seen, _bucket_storages)
        for _ in range(2):
            seen.clear()
            ddp(x).pow(2).mean().backward()
        storages = {p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes() for p in ddp.parameters()}
        out[f"gradient_as_bucket_view={flag}"] = BucketView(
            outside_buckets=sum(n for ptr, n in storages.items() if ptr not in seen),
            bucket_buffers=sum(seen.values()),  # measured: the bytes of the buffers the comm hook saw
            grad_storages=len(storages),
        )
        del ddp
    return out


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


def view_memory(setup: Setup = DEFAULT, cap_mb: float = 0.25) -> tuple[StepMemory, StepMemory]:
    """The flag off, then on (call on every rank)."""
    return step_memory(False, setup, cap_mb), step_memory(True, setup, cap_mb)


HOOKS: dict[str, Callable[[], tuple[Any, Callable[..., Any]]]] = {
    "all-reduce (float32)": lambda: (None, default_hooks.allreduce_hook),
    "fp16_compress_hook": lambda: (None, default_hooks.fp16_compress_hook),
    "bf16_compress_hook": lambda: (None, default_hooks.bf16_compress_hook),
    "PowerSGD rank 1": lambda: (
        powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=2),
        powerSGD_hook.powerSGD_hook,
    ),
}
"""Comm hooks from ``torch.distributed.algorithms.ddp_comm_hooks``: name -> () -> (state, hook).
PowerSGD sends plain all-reduces for its first ``start_powerSGD_iter`` steps, then low-rank factors."""


def hooks(updates: int = 4, setup: Setup = DEFAULT) -> dict[str, HookRun | Refused]:
    """Train ``updates`` SGD steps with each of ``HOOKS`` (same data, same start) and count, with
    ``CommCounter.track``, what the hook sends: bytes and dtypes per update, the final parameters'
    largest distance to the float32 all-reduce run, and whether the ranks agree. A hook the backend
    refuses (bf16 on gloo) gets a ``Refused`` with DDP's message."""
    info, out, ref = dist_info(), {}, None
    for name, make in HOOKS.items():
        # One bucket: PowerSGD's callbacks issue collectives from gloo's threads, and with several
        # buckets in flight the ranks can order them differently and deadlock.
        ddp = wrap(model(setup), 25)
        try:
            ddp.register_comm_hook(*make())
        except TypeError as e:  # bf16 needs NCCL >= 2.10 (or XCCL): gloo refuses it
            out[name] = Refused(str(e))
            continue
        counter = hooked_steps(ddp, updates, setup)
        params = flat(ddp.module, dtype=torch.float64)
        ref = params if ref is None else ref
        everyone = [None] * info.world_size
        dist.all_gather_object(everyone, fingerprint(ddp.module))
        out[name] = HookRun(
            bytes_per_update=[p["bytes"] for p in counter.summary()["per_step"]],
            dtypes=sorted({e.dtype for e in counter.events}),
            max_diff=(params - ref).abs().max().item(),
            ranks_agree=len(set(everyone)) == 1,
        )
        del ddp
    return out


def buffers(pattern: tuple[bool, ...] = (False, False, True, False, False)) -> list[BufferForward]:
    """A model with BatchNorm (buffers) under DDP with its default buffer sync (torch 2.13:
    ``forward_sync_buffers=None``, which means True; ``broadcast_buffers`` is its deprecated name,
    and ``will_sync_module_buffers()`` reads ``forward_sync_buffers``), one forward per
    entry of ``pattern`` (True: inside ``no_sync``). Per forward: ``require_forward_param_sync``
    before it, whether it broadcast rank 0's buffers (``_sync_buffers`` called), the flag after."""
    info = dist_info()
    torch.manual_seed(0)
    ddp = wrap(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)), 25)
    calls, real = [0], ddp._sync_buffers

    def counting() -> None:
        calls[0] += 1
        real()

    ddp._sync_buffers = counting  # an instance attribute shadows the method DDP calls
    g, rows = torch.Generator().manual_seed(400 + info.rank), []
    for inside in pattern:
        before, calls[0] = ddp.require_forward_param_sync, 0
        with ddp.no_sync() if inside else nullcontext():
            ddp(torch.randn(4, 8, generator=g).to(info.device)).sum().backward()
        rows.append(BufferForward(inside, before, calls[0] > 0, ddp.require_forward_param_sync))
    del ddp
    return rows


def measure(setup: Setup = DEFAULT, cap_mb: float = 0.25) -> Settings:
    """Every measurement of this module, on this rank (call it on every rank)."""
    return Settings(
        cap_mb=cap_mb,
        buckets=first_buckets(cap_mb, setup=setup),
        search_us=search_cost(setup=setup),
        bucket_view=bucket_view(setup),
        step_memory=view_memory(setup, cap_mb),
        hooks=hooks(setup=setup),
        buffers=buffers(),
        param_bytes=nbytes(model(setup).parameters()),
    )
