"""The collectives of a run, per kind, and what they cost on a simulated link.

    from lab_utils.topics.fsdp import traffic
    traffic.per_op(counter.events)                       # {'all_gather_single': {'count', 'bytes'}, ...}
    traffic.sent_per_rank(counter.events, world_size=2)  # bytes one rank sends on a ring
    traffic.simulated_seconds(counter.events, LINKS["10GbE"], world_size=2)   # per step, a model

Bytes as ``CommCounter`` records them: an all-reduce its buffer, an all-gather its gathered
(full) output, a reduce-scatter this rank's output chunk. On a ring each rank sends
``2 (p-1)/p n`` for an all-reduce of ``n`` bytes, ``(p-1)/p n`` for an all-gather of ``n``
gathered bytes and ``(p-1) c`` for a reduce-scatter of chunk ``c``: so an all-reduce costs one
reduce-scatter plus one all-gather. The simulated time is ``lab_utils.simnet``'s alpha-beta
model, collectives one after another (no overlap with compute: a model, labelled simulated).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lab_utils.simnet import Link, simulate

__all__ = ["per_op", "sent_per_rank", "simulated_seconds", "SIMNET_NAME"]

# simnet names the collectives as the older torch.distributed functions; FSDP2 calls the *_single ones.
SIMNET_NAME = {"all_gather_single": "all_gather_into_tensor", "reduce_scatter_single": "reduce_scatter_tensor"}


def _fields(e: Any) -> tuple[str, int, int]:
    return (e["op"], e["nbytes"], e["step"]) if isinstance(e, dict) else (e.op, e.nbytes, e.step)


def per_op(events: Iterable[Any]) -> dict[str, dict[str, int]]:
    """Count and bytes of each kind of collective among ``events`` (``CommEvent``s or dicts)."""
    out: dict[str, dict[str, int]] = {}
    for e in events:
        op, nbytes, _ = _fields(e)
        row = out.setdefault(op, {"count": 0, "bytes": 0})
        row["count"] += 1
        row["bytes"] += nbytes
    return out


def _sent(op: str, nbytes: int, p: int) -> float:
    if op == "all_reduce":
        return 2 * (p - 1) / p * nbytes
    if op.startswith("all_gather"):
        return (p - 1) / p * nbytes
    if op.startswith("reduce_scatter"):
        return (p - 1) * nbytes
    raise ValueError(f"op={op!r}: sent_per_rank knows all_reduce, all_gather* and reduce_scatter*")


def sent_per_rank(events: Iterable[Any], *, world_size: int) -> float:
    """Bytes one rank sends for ``events`` when every collective runs as a ring."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: must be >= 1")
    return sum(_sent(op, nbytes, world_size) for op, nbytes, _ in map(_fields, events))


def simulated_seconds(events: Iterable[Any], link: Link, *, world_size: int) -> list[float]:
    """Simulated communication seconds per step of ``events`` on ``link`` (simnet's model)."""
    renamed = []
    for e in events:
        op, nbytes, step = _fields(e)
        renamed.append({"op": SIMNET_NAME.get(op, op), "nbytes": nbytes, "step": step})
    return simulate(renamed, link, world_size)
