"""Run a chain of blocks following a schedule, each checkpointed segment with torch's checkpoint.

    from lab_utils.topics.checkpointing import runners
    y = runners.run_chain(model, x, [(0, 4, "full"), (4, 6, "store"), (6, 8, "selective")])
    y = runners.run_chain(model, x, "sqrt(N)")            # a name in schedules.STRATEGIES
    y = runners.checkpoint_region(fn, x, policy=my_policy) # one region, selective when a policy

The lab writes the checkpointed block itself (a notebook cell); these runners are the harness
that compares many schedules. Always ``use_reentrant=False``: reentrant checkpointing ignores
regions whose inputs do not require grad and breaks with DDP ("Expected to mark a variable
ready only once"). Selective regions go through ``policies.counted`` so the memory meter sees
what the policy caches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential, create_selective_checkpoint_contexts

from lab_utils.topics.checkpointing.policies import Policy, counted, selective_policy
from lab_utils.topics.checkpointing.schedules import Segment, check_segments, strategy_segments

__all__ = ["checkpoint_region", "run_chain"]


def checkpoint_region(fn: Callable, *args, policy: Policy | None = None):
    """``checkpoint(fn, *args, use_reentrant=False)``, selective when ``policy`` is given (what
    the policy saves is reported to an active SavedTensorMeter)."""
    if policy is None:
        return checkpoint(fn, *args, use_reentrant=False)
    contexts = functools.partial(create_selective_checkpoint_contexts, counted(policy))
    return checkpoint(fn, *args, use_reentrant=False, context_fn=contexts)


def run_chain(
    model: nn.Sequential,
    x: torch.Tensor,
    segments: Sequence[Segment] | str,
    *,
    policy: Policy | None = None,
    k: int = 2,
) -> torch.Tensor:
    """Run the blocks of ``model`` on ``x`` following ``segments`` (or a name in STRATEGIES).

    "full" segments use ``checkpoint(..., use_reentrant=False)``; "selective" ones add a policy
    (``policy``, default ``selective_policy()``: save matmul outputs); the strategy name
    "checkpoint_sequential" calls torch's ``checkpoint_sequential`` with ``k`` segments."""
    blocks = list(model.children()) if isinstance(model, nn.Sequential) else list(model)
    n = len(blocks)
    if isinstance(segments, str):
        if segments == "checkpoint_sequential":
            return checkpoint_sequential(model, k, x, use_reentrant=False)
        segments = strategy_segments(segments, n, k)
    check_segments(segments, n)
    sel = policy or selective_policy()
    h = x
    for s, e, m in segments:
        part = nn.Sequential(*blocks[s:e]) if e - s > 1 else blocks[s]
        h = part(h) if m == "store" else checkpoint_region(part, h, policy=sel if m == "selective" else None)
    return h
