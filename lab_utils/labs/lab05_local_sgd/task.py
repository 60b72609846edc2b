"""The lab task: the same small MLP on every rank, Gaussian blobs split into one shard per rank.

``skew``: 0 gives every rank the same mix of classes, 1 each rank only its own (drift hurts).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from lab_utils.data import classification
from lab_utils.models import mlp

__all__ = [
    "TASK",
    "OPTIMIZERS",
    "make_model",
    "make_data",
    "default_lr",
    "make_optimizer",
    "rank_shard",
    "rank_batches",
]

# 10 Gaussian blobs in 32 dimensions, an MLP of 11,082 parameters (44 KB of fp32).
TASK: dict[str, Any] = dict(dim=32, classes=10, width=64, depth=2, per_rank=1024, batch=32, eval_n=2048)
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


def make_model(*, seed: int = 0, batchnorm: bool = False) -> nn.Sequential:
    """The lab MLP (``lab_utils.models.mlp``); ``batchnorm`` adds a layer with running buffers."""
    model = mlp(TASK["width"], TASK["depth"], in_dim=TASK["dim"], out_dim=TASK["classes"], seed=seed)
    if batchnorm:
        model.insert(1, nn.BatchNorm1d(TASK["width"]))
    return model


def make_data(
    world: int, *, per_rank: int | None = None, eval_n: int | None = None, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training set of ``per_rank * world`` samples and a held-out set of ``eval_n`` (same blobs)."""
    per_rank = TASK["per_rank"] if per_rank is None else per_rank
    eval_n = TASK["eval_n"] if eval_n is None else eval_n
    n = per_rank * world
    x, y = classification(n + eval_n, dim=TASK["dim"], n_classes=TASK["classes"], seed=seed)
    return x[:n], y[:n], x[n:], y[n:]


def default_lr(name: str) -> float:
    """The learning rate ``make_optimizer(name, ...)`` uses when none is given: ``default_lr("sgd") * 8``."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer={name!r} is not one of {OPTIMIZERS}")
    return 0.1 if name in ("sgd", "momentum") else 3e-3


def make_optimizer(name: str, params: Iterable[nn.Parameter], lr: float | None = None) -> torch.optim.Optimizer:
    """``sgd``, ``momentum`` (0.9), ``adam`` or ``adamw``; lr ``default_lr(name)`` unless given."""
    lr = lr if lr is not None else default_lr(name)
    # foreach: one kernel per operation for all tensors (the CPU default is one per tensor)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, foreach=True)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=True)


def rank_shard(y: torch.Tensor, rank: int, world: int, skew: float = 0.0, seed: int = 0) -> torch.Tensor:
    """Indices of this rank's samples. ``skew=0``: every ``world``-th sample (the ranks see the same
    mix of classes); ``skew=1``: a sample of class c goes to rank ``c % world`` (each rank sees only
    its own classes); in between, that fraction of samples is placed by class, the rest in turn."""
    if not 0.0 <= skew <= 1.0:
        raise ValueError(f"skew={skew}: must lie in [0, 1] (0 = same data mix on every rank)")
    by_class = torch.rand(len(y), generator=torch.Generator().manual_seed(seed + 7)) < skew
    owner = torch.where(by_class, y % world, torch.arange(len(y)) % world)
    return torch.nonzero(owner == rank).flatten()


def rank_batches(
    x: torch.Tensor,
    y: torch.Tensor,
    rank: int,
    world: int,
    *,
    batch: int | None = None,
    steps: int,
    seed: int = 0,
    skew: float = 0.0,
    once: bool = False,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches from this rank's shard (see ``rank_shard``), reshuffled each epoch;
    ``once``: one epoch only (a ValueError if the shard holds fewer than ``steps`` batches)."""
    batch = TASK["batch"] if batch is None else batch
    idx = rank_shard(y, rank, world, skew, seed)
    xs, ys = x[idx], y[idx]
    per_epoch = max(1, len(xs) // batch)
    if once and per_epoch < steps:
        raise ValueError(f"once=True: rank {rank}'s shard holds {per_epoch} batches, fewer than steps={steps}")
    for s in range(steps):
        epoch, i = divmod(s, per_epoch)
        if i == 0:
            order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        sel = order[i * batch : (i + 1) * batch]
        yield xs[sel], ys[sel]
