"""The shared pieces of lab 3's runs: one model, one dataset, the micro-batches, the large-batch
reference, and ``train``, the rank-side harness that runs a notebook's update function under DDP
with a counting comm hook attached from outside.

    from lab_utils import launch
    from lab_utils.labs.lab03_ddp import workload

    def no_sync_update(ddp, optimizer, micro_batches): ...   # a notebook cell: one update

    res = launch(workload.train, 2, args=(no_sync_update,), kwargs={"k": 4})
    res[0].collectives_per_update                     # [1, 1]: one bucket, one sync per update
    ref = workload.large_batch_reference(k=4, world_size=2)   # one process, batch 2 x 4 x 16

The sample order is fixed so that update ``u`` of a DDP run on W ranks with K micro-batches sees
exactly the samples of large batch ``u`` of the single-process reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils import data, models
from lab_utils.checks import fingerprint
from lab_utils.comm import CommCounter
from lab_utils.env import dist_info
from lab_utils.flat import flat

__all__ = [
    "Setup",
    "DEFAULT",
    "UpdateFn",
    "model",
    "dataset",
    "param_bytes",
    "wrap",
    "train",
    "UpdateRun",
    "hooked_steps",
    "large_batch_reference",
]

UpdateFn = Callable[[DDP, torch.optim.Optimizer, Sequence[tuple[torch.Tensor, torch.Tensor]]], None]
"""One optimizer update from K micro-batches: ``update(ddp, optimizer, micro_batches)``."""


@dataclass(frozen=True)
class Setup:
    """The model and data of every run: an MLP on a seeded regression, ``micro_batch`` samples
    per micro-batch per rank, plain SGD with learning rate ``lr``."""

    dim: int = 32
    width: int = 256
    depth: int = 4
    micro_batch: int = 16
    lr: float = 0.05
    seed: int = 0


DEFAULT = Setup()
"""The lab's setup (a frozen dataclass, so one shared default is safe)."""


def model(setup: Setup = DEFAULT) -> nn.Sequential:
    """Linear(dim, width) -> depth x [Linear(width, width) + GELU] -> Linear(width, 1), seeded."""
    if not isinstance(setup, Setup):
        raise TypeError(f"setup must be a workload.Setup, got {type(setup).__name__}; e.g. Setup(micro_batch=8)")
    return models.mlp(setup.width, setup.depth, in_dim=setup.dim, out_dim=1, seed=setup.seed)


def dataset(n_samples: int, setup: Setup = DEFAULT) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeded regression every run draws from (``data.regression``)."""
    return data.regression(n=n_samples, dim=setup.dim, seed=setup.seed + 1)


def param_bytes(module: nn.Module) -> list[int]:
    """Bytes of each parameter, in registration order (the order ``parameters()`` gives)."""
    return [p.numel() * p.element_size() for p in module.parameters()]


def wrap(module: nn.Module, bucket_cap_mb: float | None = 25, **ddp_kwargs: Any) -> DDP:
    """``module`` on this rank's device inside DDP (None = DDP's default buckets); other DDP
    keyword arguments (``find_unused_parameters=True``, ``static_graph=True``...) pass through."""
    info = dist_info()
    module = module.to(info.device)
    ids = [info.device.index] if info.device.type == "cuda" else None
    return DDP(module, device_ids=ids, bucket_cap_mb=bucket_cap_mb, **ddp_kwargs)


@dataclass(frozen=True)
class UpdateRun:
    """What ``train`` measured on one rank: per update the all-reduces and bytes the comm hook
    counted, the parameters' bytes, the final parameters' fingerprint and the parameters, flat
    float64 on the CPU."""

    k: int
    world_size: int
    backend: str
    collectives_per_update: list[int]
    bytes_per_update: list[int]
    param_bytes: int
    fingerprint: str
    params: torch.Tensor


def train(
    update: UpdateFn,
    k: int = 4,
    *,
    updates: int = 2,
    bucket_cap_mb: float | None = 25,
    setup: Setup = DEFAULT,
) -> UpdateRun:
    """On this rank: ``updates`` calls of ``update(ddp, optimizer, micro_batches)`` with K
    micro-batches each, DDP's all-reduces counted by a comm hook, measured from outside."""
    if not callable(update):
        raise TypeError(f"update must be a function (ddp, optimizer, micro_batches) -> None, got {update!r}")
    if k < 1 or updates < 1:
        raise ValueError(f"k={k}, updates={updates}: both must be >= 1")
    info = dist_info()
    ddp = wrap(model(setup), bucket_cap_mb)
    counter = CommCounter().attach(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=setup.lr)
    big = k * info.world_size * setup.micro_batch  # one update of all ranks: the reference's batch
    x, y = dataset(updates * big, setup)
    for xu, yu in zip(x.split(big), y.split(big)):
        mbs = data.micro_batches(xu, yu, k=k, rank=info.rank, world_size=info.world_size)
        mbs = [(a.to(info.device), b.to(info.device)) for a, b in mbs]
        update(ddp, opt, mbs)
        counter.mark_step()
    per_step = counter.summary()["per_step"]
    out = UpdateRun(
        k=k,
        world_size=info.world_size,
        backend=info.backend,
        collectives_per_update=[p["collectives"] for p in per_step],
        bytes_per_update=[p["bytes"] for p in per_step],
        param_bytes=sum(param_bytes(ddp.module)),
        fingerprint=fingerprint(ddp.module),
        params=flat(ddp.module, dtype=torch.float64),
    )
    del ddp, opt, counter
    return out


def hooked_steps(ddp: DDP, updates: int, setup: Setup = DEFAULT) -> CommCounter:
    """``updates`` SGD steps of ``ddp`` (whose comm hook the caller registered), one micro-batch
    per rank each; returns the counter of what the hook sent (``CommCounter.track``)."""
    info = dist_info()
    opt = torch.optim.SGD(ddp.parameters(), lr=setup.lr)
    big = info.world_size * setup.micro_batch
    x, y = dataset(updates * big, setup)
    counter = CommCounter()
    for xu, yu in zip(x.split(big), y.split(big)):
        ((xb, yb),) = data.micro_batches(xu, yu, k=1, rank=info.rank, world_size=info.world_size)
        opt.zero_grad()
        with counter.track():
            F.mse_loss(ddp(xb.to(info.device)), yb.to(info.device)).backward()
        opt.step()
        counter.mark_step()
    return counter


def large_batch_reference(
    k: int = 4,
    world_size: int = 2,
    *,
    updates: int = 2,
    setup: Setup = DEFAULT,
    loss_scale: float = 1.0,
    zero_grad: bool = True,
) -> torch.Tensor:
    """One process, no DDP: ``updates`` SGD steps on batches of ``world_size * k * micro_batch``
    samples (the same samples, in the same updates, as the DDP runs). Returns the flat parameters.
    ``loss_scale`` and ``zero_grad=False`` give the two mistakes lab 3's grader names."""
    net = model(setup)
    opt = torch.optim.SGD(net.parameters(), lr=setup.lr)
    big = world_size * k * setup.micro_batch
    x, y = dataset(updates * big, setup)
    opt.zero_grad()
    for u in range(updates):
        if zero_grad:
            opt.zero_grad()
        (loss_scale * F.mse_loss(net(x[u * big : (u + 1) * big]), y[u * big : (u + 1) * big])).backward()
        opt.step()
    return flat(net, dtype=torch.float64)
