"""A hand-written accumulation loop and ``accumulator.accumulate()`` side by side, on one rank.

    from lab_utils.launch import launch
    from lab_utils.topics.hf import handsync
    ranks = launch(handsync.compare_on_rank, world_size=2, args=(train_by_hand,))
    ranks[0]["gap"], ranks[0]["collectives"], ranks[0]["reference_collectives"]

``train_by_hand(accelerator, model, optimizer, batches)`` trains a prepared toy model (SGD) on
this rank's micro-batches; the reference is the same model from the same start trained with
``accumulate()``. Light imports (torch, accelerate) so ranks start quickly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator

from lab_utils.checks import param_max_diff
from lab_utils.comm import CommCounter

__all__ = ["compare_on_rank"]

_K, _WINDOWS, _LR = 4, 2, 0.5


def _toy(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _prepared(accelerator: Accelerator) -> tuple[Any, Any, CommCounter]:
    model = _toy()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=_LR))
    counter = CommCounter()
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        counter.attach(model)
    return model, optimizer, counter


def compare_on_rank(train_by_hand: Callable[..., Any]) -> dict[str, Any]:
    """On one rank: the student's loop and the ``accumulate()`` loop, from the same start on the
    same micro-batches; their parameters and gradient all-reduces. Run it with ``launch``."""
    accelerator = Accelerator(gradient_accumulation_steps=_K, cpu=True)
    g = torch.Generator().manual_seed(100 + accelerator.process_index)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(_K * _WINDOWS)]

    model, optimizer, counter = _prepared(accelerator)
    train_by_hand(accelerator, model, optimizer, batches)
    mine = [p.detach().clone() for p in model.parameters()]
    mine_comm = len(counter.events)

    model, optimizer, counter = _prepared(accelerator)
    for x, y in batches:
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    ref = [p.detach().clone() for p in model.parameters()]
    moved = param_max_diff(ref, list(_toy().parameters()))
    return {
        "gap": param_max_diff(mine, ref),
        "moved": moved,
        "collectives": mine_comm,
        "reference_collectives": len(counter.events),
        "world": dist.get_world_size() if dist.is_initialized() else 1,
    }
