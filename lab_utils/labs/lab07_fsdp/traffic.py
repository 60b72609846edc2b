"""The collectives of a run, per kind, and what they cost on a modelled link.

    traffic.per_op(counter.events)                       # {'all_gather_single': {'count', 'bytes'}, ...}
    traffic.sent_per_rank(counter.events, world_size=2)  # bytes one rank sends on a ring
    traffic.update_seconds(counter.events, k=4, depth=4, forward_s=f, backward_s=b,
                           link=LINKS["10GbE"], world_size=2)    # overlapped with compute, and serial

On a ring a rank sends ``2 (p-1)/p n`` for an all-reduce of n bytes, ``(p-1)/p n`` for an
all-gather of n gathered bytes and ``(p-1) c`` for a reduce-scatter of chunk c: an all-reduce
costs one reduce-scatter plus one all-gather.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lab_utils.netmodel import Bucket, Link, backward_with_comm, collective_seconds

__all__ = ["per_op", "sent_per_rank", "micro_step_buckets", "update_seconds"]


def per_op(events: Iterable[Any]) -> dict[str, dict[str, int]]:
    """Count and bytes of each kind of collective among ``events`` (``CommEvent``s)."""
    out: dict[str, dict[str, int]] = {}
    for e in events:
        row = out.setdefault(e.op, {"count": 0, "bytes": 0})
        row["count"] += 1
        row["bytes"] += e.nbytes
    return out


def _sent(op: str, nbytes: int, p: int) -> float:
    if op == "all_reduce":
        return 2 * (p - 1) / p * nbytes
    if op.startswith("all_gather"):
        return (p - 1) / p * nbytes
    if op.startswith("reduce_scatter"):
        return (p - 1) * nbytes
    if op == "broadcast":  # a chain from the root: every rank but the last forwards n, (p-1)/p n on average
        return (p - 1) / p * nbytes
    raise ValueError(f"op={op!r}: sent_per_rank knows all_reduce, all_gather*, reduce_scatter* and broadcast")


def sent_per_rank(events: Iterable[Any], *, world_size: int) -> float:
    """Bytes one rank sends for ``events`` when every collective runs as a ring."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: must be >= 1")
    return sum(_sent(e.op, e.nbytes, world_size) for e in events)


def micro_step_buckets(events: Iterable[Any], *, depth: int, forward_s: float, backward_s: float) -> list[Bucket]:
    """One FSDP2 micro-step's counted collectives (in the order they ran) as buckets on a timeline
    of ``forward_s + backward_s`` seconds of compute, ``depth`` equal blocks: the first ``depth``
    all-gathers are the forward's (block b's is issued when block b - 1 starts: prefetched one
    block ahead), the later ones the backward's (the same, in reverse block order), and each
    reduce-scatter is ready when its block's backward ends."""
    f, b = forward_s / depth, backward_s / depth
    gathers = reduces = 0
    out = []
    for e in events:
        op, nbytes = e.op, e.nbytes
        if op.startswith("all_gather"):
            i = gathers  # forward: block i; backward: block depth - 1 - (i - depth)
            ready = max(i - 1, 0) * f if i < depth else forward_s + max(i - depth - 1, 0) * b
            gathers += 1
        elif op.startswith("reduce_scatter"):
            reduces += 1
            ready = forward_s + reduces * b
        else:
            raise ValueError(f"op={op!r}: an FSDP2 micro-step has all-gathers and reduce-scatters only")
        out.append(Bucket(min(ready, forward_s + backward_s), nbytes, op))
    return out


def update_seconds(
    events: Iterable[Any], *, k: int, depth: int, forward_s: float, backward_s: float, link: Link, world_size: int
) -> dict[str, float]:
    """Modelled seconds of the first update (``k`` micro-steps; counter steps as ``MeteredBatches``
    marks them) on ``link``: ``"overlapped"``, each micro-step's collectives queued on the link as
    ``micro_step_buckets`` makes them ready while the compute goes on
    (``lab_utils.netmodel.backward_with_comm``), and ``"serial"``, the compute then every collective
    one after another. The overlapped model assumes a prefetched all-gather never stalls its block
    (a late one only delays the end of the micro-step) and queues every collective on one link in
    one FIFO (NCCL uses separate streams for all-gathers and reduce-scatters): where communication
    exceeds the compute it is a lower bound, as ``serial`` is one from above."""
    by_step: dict[int, list] = {}
    for e in events:
        by_step.setdefault(e.step, []).append(e)
    micro = [evs for _, evs in sorted(by_step.items())][:k]
    if len(micro) < k:
        raise ValueError(f"k={k}: the events hold only {len(micro)} micro-steps with collectives")
    compute = forward_s + backward_s
    overlapped = serial = 0.0
    for evs in micro:
        buckets = micro_step_buckets(evs, depth=depth, forward_s=forward_s, backward_s=backward_s)
        overlapped += backward_with_comm(buckets, compute, link, world_size).end_s
        serial += compute + sum(collective_seconds(bk.op, bk.nbytes, world_size, link) for bk in buckets)
    return {"overlapped": overlapped, "serial": serial}
