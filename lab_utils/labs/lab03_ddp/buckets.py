"""Gradient buckets: how many all-reduces one synchronised backward makes, measured and predicted.

    from lab_utils import launch
    from lab_utils.labs.lab03_ddp import buckets
    got = launch(buckets.counts, 2, kwargs={"caps": (None, 25, 0.25)})[0]
    got.per_step["0.25"]                                     # [1, 5, 5]: one bucket until the rebuild
    buckets.predict(list(reversed(got.param_bytes)), int(0.25 * 2**20))      # the rebuilt sizes

DDP packs gradients into buckets of about ``bucket_cap_mb`` in the order they become ready and
all-reduces each full bucket; it rebuilds the buckets after the first iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lab_utils.comm import CommCounter
from lab_utils.env import dist_info
from lab_utils.labs.lab03_ddp.workload import DEFAULT, Setup, model, param_bytes, wrap

__all__ = ["Counts", "counts", "predict"]


@dataclass(frozen=True)
class Counts:
    """Per ``str(bucket_cap_mb)``: the bytes of each bucket each backward all-reduced; and the
    parameters' bytes in registration order."""

    bucket_bytes: dict[str, list[list[int]]]
    param_bytes: list[int]

    @property
    def per_step(self) -> dict[str, list[int]]:
        """Per ``str(bucket_cap_mb)``: the all-reduces of each backward (one per bucket)."""
        return {cap: [len(b) for b in steps] for cap, steps in self.bucket_bytes.items()}


def counts(caps: Sequence[float | None] = (None, 25, 1, 0.25), steps: int = 3, setup: Setup = DEFAULT) -> Counts:
    """For each ``bucket_cap_mb`` in ``caps`` (None = DDP's default), a fresh DDP model runs
    ``steps`` plain forward/backward steps on this rank (call it on every rank). Returns the
    all-reduces of each backward and the bytes of each bucket, keyed by ``str(cap)``, and the
    parameters' sizes in registration order."""
    if steps < 1:
        raise ValueError(f"steps={steps}: need at least one backward to count")
    info = dist_info()
    out = Counts({}, param_bytes(model(setup)))
    g = torch.Generator().manual_seed(200 + info.rank)
    for cap in caps:
        ddp = wrap(model(setup), cap)
        counter = CommCounter().attach(ddp)
        for _ in range(steps):
            x = torch.randn(setup.micro_batch, setup.dim, generator=g).to(info.device)
            ddp(x).pow(2).mean().backward()
            counter.mark_step()
        out.bucket_bytes[str(cap)] = [[e.nbytes for e in counter.events if e.step == s] for s in range(steps)]
        del ddp, counter
    return out


def predict(sizes: Sequence[int], cap_bytes: int, *, first_cap_bytes: int | None = None) -> list[int]:
    """The reducer's greedy bucketing: walk the gradients in the order they become ready (for a
    sequential model, ``sizes`` reversed), add each to the open bucket, close the bucket once it
    holds at least its limit (``first_cap_bytes`` for the first, ``cap_bytes`` after). Returns the
    bytes of each bucket. (DDP's default: 1 MiB first, 25 MiB after, from the second iteration on.)"""
    if cap_bytes <= 0:
        raise ValueError(f"cap_bytes={cap_bytes}: a bucket limit must be a positive number of bytes")
    found, current = [], 0
    limit = cap_bytes if first_cap_bytes is None else first_cap_bytes
    for n in sizes:
        current += n
        if current >= limit:
            found.append(current)
            current, limit = 0, cap_bytes
    if current:
        found.append(current)
    return found
