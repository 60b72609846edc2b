"""A model cut into pipeline stages, its micro-batches, and the one-process reference.

    spec = stages.Spec(depth=8, width=128, batch=64)        # the model and data every run shares
    parts = stages.split(stages.model(spec), 2, boundaries=[3])   # [blocks 0-2, blocks 3-7]
    xs, ys = stages.micro_batches(spec, m=4)                # the batch cut into 4 micro-batches
    grads = stages.reference_grads(spec)                    # one process, the whole batch
    stages.piece_flops(spec, p=2, m=4)                      # [(forward, backward) FLOPs] per stage

The loss is the mean over the whole batch, so a pipeline of m micro-batches divides each
micro-batch's mean loss by m (as accumulation does).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils import data, models
from lab_utils.flat import flat

__all__ = [
    "Spec",
    "model",
    "split",
    "stage_sizes",
    "check_shapes",
    "batch",
    "micro_batches",
    "loss_fn",
    "reference_grads",
    "piece_flops",
]


@dataclass(frozen=True)
class Spec:
    """The model (``depth`` blocks Linear+GELU of ``width``; with ``hidden``, one block per entry,
    Linear(width, h) -> GELU -> Linear(h, width), so blocks cost unequal amounts but every
    boundary carries [micro-batch, width]) and the data (``batch`` samples, a seeded regression)."""

    depth: int = 8
    width: int = 128
    batch: int = 64
    seed: int = 0
    dtype: torch.dtype = torch.float32
    hidden: tuple[int, ...] = ()  # per-block hidden sizes (an uneven model); empty: `depth` equal blocks


def model(spec: Spec) -> nn.Sequential:
    """The blocks of ``spec`` in an ``nn.Sequential``; the loss is MSE to a target of ``width``."""
    if not spec.hidden:
        return models.mlp(spec.width, spec.depth, seed=spec.seed, dtype=spec.dtype)
    torch.manual_seed(spec.seed)
    w = spec.width
    blocks = [nn.Sequential(nn.Linear(w, h), nn.GELU(), nn.Linear(h, w)) for h in spec.hidden]
    return nn.Sequential(*blocks).to(spec.dtype)


def split(model: nn.Sequential, n_stages: int, boundaries: Sequence[int] | None = None) -> list[nn.Sequential]:
    """Cut ``model`` into ``n_stages`` contiguous stages (the same module objects, not copies).

    Without ``boundaries`` the blocks are shared out evenly (earlier stages take the remainder)."""
    n = len(model)
    if not isinstance(n_stages, int) or n_stages < 1:
        raise ValueError(f"n_stages={n_stages!r}: give a positive number of stages (one per rank)")
    if n_stages > n:
        raise ValueError(
            f"n_stages={n_stages} but the model has only {n} blocks: every stage needs at least one "
            f"block. Use n_stages <= {n} (fewer ranks) or a deeper model."
        )
    if boundaries is None:
        sizes = stage_sizes(n, n_stages)
        boundaries = [sum(sizes[:i]) for i in range(1, n_stages)]
    cuts = [0, *boundaries, n]
    if len(boundaries) != n_stages - 1 or any(a >= b for a, b in zip(cuts, cuts[1:])):
        raise ValueError(
            f"boundaries={list(boundaries)} for {n_stages} stages of {n} blocks: give {n_stages - 1} "
            f"increasing block indices between 1 and {n - 1} (the first block of stages 1..{n_stages - 1})"
        )
    return [model[a:b] for a, b in zip(cuts, cuts[1:])]


def stage_sizes(n_blocks: int, n_stages: int) -> list[int]:
    """Blocks per stage when ``n_blocks`` are shared out evenly (the first stages take one more)."""
    q, r = divmod(n_blocks, n_stages)
    return [q + (i < r) for i in range(n_stages)]


def check_shapes(parts: Sequence[nn.Module], example: torch.Tensor) -> list[tuple[int, ...]]:
    """Run ``example`` through the stages (no gradients) and return the shape each stage sends.

    Raises ValueError naming the two stages whose shapes do not meet and what to change: the
    check a pipeline needs before it starts, because a receive with the wrong shape hangs or fails
    on the far rank with a message about bytes, not layers."""
    shapes, x = [], example
    with torch.no_grad():
        for i, part in enumerate(parts):
            try:
                x = part(x)
            except RuntimeError as err:
                raise ValueError(
                    f"stage {i} cannot take the {tuple(x.shape)} tensor that "
                    f"{'stage ' + str(i - 1) if i else 'the batch'} gives it ({err}). Make the last layer "
                    f"of stage {i - 1} and the first layer of stage {i} agree on the feature size "
                    f"(or move the boundary between them)."
                ) from None
            shapes.append(tuple(x.shape))
    return shapes


def batch(spec: Spec) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch: inputs and regression targets, both [batch, width], seeded."""
    g = torch.Generator().manual_seed(spec.seed + 1)
    x = torch.randn(spec.batch, spec.width, generator=g).to(spec.dtype)
    y = torch.randn(spec.batch, spec.width, generator=g).to(spec.dtype)
    return x, y


def micro_batches(spec: Spec, m: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The batch cut into ``m`` equal micro-batches, in order, as lists of inputs and of targets
    (``data.micro_batches`` on one process)."""
    if spec.batch % m:
        raise ValueError(f"m={m} does not divide batch={spec.batch}: choose m among its divisors")
    pairs = data.micro_batches(*batch(spec), k=m)
    return [x for x, _ in pairs], [y for _, y in pairs]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean squared error of one (micro-)batch."""
    return F.mse_loss(output, target)


def reference_grads(spec: Spec) -> torch.Tensor:
    """The gradient of one large-batch step in one process: what every pipeline must equal."""
    net = model(spec)
    x, y = batch(spec)
    loss_fn(net(x), y).backward()
    return flat(net, grads=True)


def piece_flops(spec: Spec, p: int, m: int) -> list[tuple[int, int]]:
    """FLOPs of one forward and of one backward of one micro-batch on each of the p stages of
    ``spec`` (split evenly), counted by ``lab_utils.memory.recompute.count_flops`` (matrix
    products), as in a pipeline: stage 0's input is the data, which needs no gradient, so its first
    Linear computes none for it; every later stage's input does. The loss is not counted."""
    from lab_utils.memory.recompute import count_flops  # FlopCounterMode: only where it is used

    x = micro_batches(spec, m)[0][0]
    out = []
    for s, part in enumerate(split(model(spec), p)):
        held: list[torch.Tensor] = []  # the stage's output, kept from the forward for the backward
        xi = x.detach().clone().requires_grad_(s > 0)
        forward = count_flops(functools.partial(_forward_into, part, xi, held))
        backward = count_flops(functools.partial(_backward_of, held))
        out.append((forward, backward))
        x = held[0].detach()
    return out


def _forward_into(part: nn.Module, x: torch.Tensor, held: list[torch.Tensor]) -> None:
    held.append(part(x))


def _backward_of(held: list[torch.Tensor]) -> None:
    held[0].backward(torch.ones_like(held[0]))
