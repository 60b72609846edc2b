"""Accumulation windows: K micro-batches per optimizer update, and how many updates a run makes.

windows(micro_batches, 4)          # [[mb0..mb3], [mb4..mb7], [mb8, mb9]]: the last may be short
num_updates(50, 8, epochs=3)       # 21: what a scheduler's total_steps must be
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

__all__ = ["Batch", "windows", "window_sizes", "num_updates", "concat_batches"]

Batch = tuple | list | Mapping


def windows(micro_batches: Sequence, k: int, *, drop_last: bool = False) -> list[list]:
    """Group micro-batches into accumulation windows of ``k``; the last one may be shorter."""
    if k < 1:
        raise ValueError(f"k={k}: the number of micro-batches per update must be >= 1")
    items = list(micro_batches)
    out = [items[i : i + k] for i in range(0, len(items), k)]
    if drop_last and out and len(out[-1]) < k:
        out.pop()
    return out


def window_sizes(n_micro_batches: int, k: int, *, drop_last: bool = False) -> list[int]:
    """The real number of micro-batches in each window, e.g. ``window_sizes(10, 4) == [4, 4, 2]``."""
    if n_micro_batches < 0:
        raise ValueError(f"n_micro_batches={n_micro_batches}: must be >= 0")
    return [len(w) for w in windows(range(n_micro_batches), k, drop_last=drop_last)]


def num_updates(n_micro_batches: int, k: int, *, epochs: int = 1, drop_last: bool = False) -> int:
    """Optimizer updates in a run (not micro-batches): ``ceil(n / k)`` per epoch, ``n // k`` with
    ``drop_last``."""
    if k < 1 or epochs < 0:
        raise ValueError(f"num_updates(k={k}, epochs={epochs}): need k >= 1 and epochs >= 0")
    per_epoch = n_micro_batches // k if drop_last else math.ceil(n_micro_batches / k)
    return per_epoch * epochs


def concat_batches(batches: Sequence[Batch]) -> Batch:
    """Concatenate micro-batches (tuples or dicts of tensors) along dim 0 into one large batch."""
    if not batches:
        raise ValueError("concat_batches(): got no batches")
    first = batches[0]
    try:
        if isinstance(first, Mapping):
            return {key: torch.cat([b[key] for b in batches]) for key in first}
        return tuple(torch.cat(parts) for parts in zip(*batches))
    except RuntimeError as err:
        raise ValueError(
            "concat_batches(): micro-batches differ in shape beyond dim 0; pad them "
            "to the same length (e.g. the same max_len for lm_batch)"
        ) from err
