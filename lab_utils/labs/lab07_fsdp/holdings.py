"""What one rank holds: bytes of its parameters, gradients and optimizer state, measured.

    mine = holdings.rank_bytes(model, optimizer)   # {'params': ..., 'grads': ..., 'optimizer': ...}
    holdings.held_grad_bytes(model)                # gradients alive now, FSDP's unsharded ones too
    holdings.unsharded_param_bytes(model)          # all-gathered parameters alive now
    holdings.zero_bytes(param_bytes, world_size=4, stage=3)   # the ZeRO paper's formula
    micro = holdings.MeteredBatches(micro_batches, model, counter)   # measures between micro-steps

A DTensor counts its local shard. The trap: FSDP2 keeps the all-gathered parameters (between a
forward and its backward) and, with gradient sync off, the unsharded gradients outside
``model.parameters()``; both are read from its ``FSDPParam`` objects so they count too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

__all__ = [
    "local",
    "local_bytes",
    "fsdp_params",
    "rank_bytes",
    "held_grad_bytes",
    "unsharded_param_bytes",
    "sharded_param_bytes",
    "zero_bytes",
    "MeteredBatches",
]

STAGES = (0, 1, 2, 3)


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank holds: its local shard for a DTensor, ``t`` itself otherwise."""
    return t.to_local() if hasattr(t, "to_local") else t


def local_bytes(t: torch.Tensor | None) -> int:
    """Bytes of the part of one tensor ``t`` this rank holds (its local shard for a DTensor); 0 for
    None. (``lab_utils.memory.tensor_bytes`` counts many tensors' whole storages.)"""
    if t is None:
        return 0
    mine = local(t)
    return mine.numel() * mine.element_size()


def fsdp_params(model: nn.Module) -> Iterator[Any]:
    """FSDP2's parameter objects (one per parameter) of every ``fully_shard``-ed module in ``model``."""
    for m in model.modules():
        if isinstance(m, FSDPModule):
            group = m._get_fsdp_state()._fsdp_param_group
            if group is not None:
                yield from group.fsdp_params


def held_grad_bytes(model: nn.Module) -> int:
    """Gradient bytes this rank holds now: ``.grad`` of its (sharded) parameters plus the
    unsharded gradients FSDP2 keeps while gradient sync is off."""
    total = sum(local_bytes(p.grad) for p in model.parameters())
    for fp in fsdp_params(model):
        unsharded = getattr(fp, "_unsharded_param", None)
        if unsharded is not None:
            total += local_bytes(unsharded.grad)
        total += local_bytes(fp.unsharded_accumulated_grad)
    return total


def unsharded_param_bytes(model: nn.Module) -> int:
    """Bytes of all-gathered parameters alive now (0 for a model without ``fully_shard``)."""
    return sum(t.untyped_storage().nbytes() for fp in fsdp_params(model) for t in fp.all_gather_outputs)


def sharded_param_bytes(model: nn.Module) -> int:
    """Bytes of this rank's own parameter shards, read from FSDP2's parameter objects: unlike
    ``model.parameters()``, which shows the gathered tensors while a module is unsharded, these
    stay allocated under the gathered copy (0 for a model without ``fully_shard``)."""
    return sum(local_bytes(fp.sharded_param) for fp in fsdp_params(model))


def rank_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes this rank holds: ``params`` (local shards), ``grads`` (``held_grad_bytes``) and
    ``optimizer`` (per-element state tensors; AdamW's scalar ``step`` counters are left out)."""
    state = optimizer.state.values() if optimizer is not None else []
    return {
        "params": sum(local_bytes(p) for p in model.parameters()),
        "grads": held_grad_bytes(model),
        "optimizer": sum(local_bytes(v) for s in state for v in s.values() if torch.is_tensor(v) and v.dim() > 0),
    }


def zero_bytes(param_bytes: int, *, world_size: int, stage: int, optimizer_states: int = 2) -> dict[str, int]:
    """Per-rank bytes by the ZeRO paper's formulas (Rajbhandari et al. 2020), everything in the
    parameters' dtype: stage 0 is plain data parallel (DDP), stage 1 shards the optimizer state,
    stage 2 the gradients too, stage 3 (FSDP) the parameters too. Exact when ``param_bytes``
    divides by ``world_size``, as for this lab's model."""
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}: ZeRO has stages {STAGES} (0 = plain data parallel)")
    if world_size < 1 or param_bytes % world_size:
        raise ValueError(
            f"param_bytes={param_bytes} does not divide by world_size={world_size}: the formula is exact only "
            "for equal shards"
        )
    shard = param_bytes // world_size
    return {
        "params": shard if stage >= 3 else param_bytes,
        "grads": shard if stage >= 2 else param_bytes,
        "optimizer": optimizer_states * (shard if stage >= 1 else param_bytes),
    }


class MeteredBatches(list):
    """A list of micro-batches that measures between micro-steps, from outside the loop: each
    time the loop asks for the next micro-batch (so after the previous backward) and when it
    runs out, it records ``held_grad_bytes(model)`` in ``held`` and starts a new ``counter`` step.

        micro = MeteredBatches(micro_batches, model, counter)
        update(model, optimizer, micro)     # the lab's loop, unchanged
        micro.held                          # [0, after micro-step 1, ..., after micro-step K]
    """

    def __init__(self, items: list, model: nn.Module, counter: Any = None):
        super().__init__(items)
        self.model, self.counter, self.held = model, counter, []

    def __iter__(self) -> Iterator[Any]:
        for i, item in enumerate(list.__iter__(self)):
            self._measure(i)
            yield item
        self._measure(len(self))

    def _measure(self, i: int) -> None:
        self.held.append(held_grad_bytes(self.model))
        if self.counter is not None and i > 0:
            self.counter.mark_step()
