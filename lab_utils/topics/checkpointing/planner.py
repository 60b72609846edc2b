"""The planner: which blocks of a chain to checkpoint for a memory budget, with least recompute.

    from lab_utils.topics.checkpointing import planner
    plan = planner.plan_for_budget(act, inp, cost, budget=2**20)   # least recompute that fits
    plan.segments, plan.kept, plan.peak, plan.recompute
    planner.optimal_front(act, inp, cost)    # every plan no other beats on both peak and recompute

Cost model (the planner's, stated so a student can check it by hand). The chain has N blocks;
block i keeps ``act[i]`` bytes for backward when run normally (its input included when it saves
it), its input has ``inp[i]`` bytes and its forward costs ``cost[i]`` (FLOPs or seconds). A plan
cuts the chain into segments [start, stop). A stored segment keeps the sum of its blocks' ``act``;
a checkpointed ("full") segment keeps only its input ``inp[start]`` and, during backward, is run
forward again once (recompute = sum of its ``cost``), its activations existing only while its own
backward runs; backward handles one segment at a time. Hence

    kept      = sum(act over stored blocks) + sum(inp[start] over checkpointed segments)
    peak      = kept + max(sum(act over a checkpointed segment))       (0 if none)
    recompute = sum(cost over checkpointed blocks)

``kept`` is what ``lab_utils.memory.SavedTensorMeter`` measures after the forward; ``peak`` is a
model (a real allocator peak adds gradients and temporaries). With N uniform blocks and k equal
checkpointed segments, peak = k*inp + (N/k)*act, smallest near k = sqrt(N*act/inp): the sqrt(N)
rule of Chen et al. (2016), for one extra forward pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lab_utils.topics.checkpointing.schedules import Segment, check_segments

__all__ = ["Plan", "evaluate", "optimal_front", "min_peak", "plan_for_budget"]


@dataclass(frozen=True)
class Plan:
    """A schedule and its cost under the model in the module docstring."""

    segments: tuple[Segment, ...]
    kept: float
    peak: float
    recompute: float

    @property
    def checkpointed_blocks(self) -> list[int]:
        return [i for s, e, m in self.segments if m != "store" for i in range(s, e)]

    @property
    def n_checkpointed_segments(self) -> int:
        return sum(m != "store" for _, _, m in self.segments)


def _check_chain(act: Sequence[float], inp: Sequence[float], cost: Sequence[float]) -> int:
    n = len(act)
    if n == 0 or len(inp) != n or len(cost) != n:
        raise ValueError(f"act, inp and cost need the same non-zero length (got {len(act)}, {len(inp)}, {len(cost)})")
    if min(act) < 0 or min(inp) < 0 or min(cost) < 0:
        raise ValueError("act, inp and cost must be non-negative")
    return n


def evaluate(segments: Sequence[Segment], act: Sequence[float], inp: Sequence[float], cost: Sequence[float]) -> Plan:
    """Kept bytes, peak bytes and recompute cost of ``segments`` under the cost model."""
    n = _check_chain(act, inp, cost)
    check_segments(segments, n)
    kept = rec = biggest = 0.0
    for s, e, m in segments:
        if m == "store":
            kept += sum(act[s:e])
        else:
            kept += inp[s]
            rec += sum(cost[s:e])
            biggest = max(biggest, sum(act[s:e]))
    return Plan(tuple(segments), kept, kept + biggest, rec)


def _fronts(act, inp, cost, cap: float, kept_cap: float):
    """For a cap on the bytes of any checkpointed segment: Pareto sets of (kept, recompute,
    segments) over prefixes, keeping only kept <= kept_cap."""
    n = len(act)
    pre = [0.0]
    for a in act:
        pre.append(pre[-1] + a)
    cpre = [0.0]
    for c in cost:
        cpre.append(cpre[-1] + c)
    fronts: list[list[tuple[float, float, tuple]]] = [[(0.0, 0.0, ())]]
    for i in range(1, n + 1):
        cands = [(k + act[i - 1], r, segs + ((i - 1, i, "store"),)) for k, r, segs in fronts[i - 1]]
        j = i - 1
        while j >= 0 and pre[i] - pre[j] <= cap:
            for k, r, segs in fronts[j]:
                cands.append((k + inp[j], r + cpre[i] - cpre[j], segs + ((j, i, "full"),)))
            j -= 1
        cands.sort(key=lambda t: (t[0], t[1]))
        front, best_r = [], math.inf
        for k, r, segs in cands:  # keep the points no other point beats on both axes
            if k <= kept_cap and r < best_r:
                front.append((k, r, segs))
                best_r = r
        fronts.append(front)
    return fronts[n]


def _caps(act) -> list[float]:
    n = len(act)
    return sorted({0.0} | {float(sum(act[j:i])) for j in range(n) for i in range(j + 1, n + 1)})


def _merge(segs: tuple) -> tuple[Segment, ...]:
    """Join neighbouring stored blocks into one stored segment (same cost, easier to read)."""
    out: list[Segment] = []
    for s, e, m in segs:
        if out and m == "store" and out[-1][2] == "store":
            out[-1] = (out[-1][0], e, "store")
        else:
            out.append((s, e, m))
    return tuple(out)


def optimal_front(act: Sequence[float], inp: Sequence[float], cost: Sequence[float]) -> list[Plan]:
    """Every plan on the optimal memory/recompute front (least recompute for its peak), sorted
    by peak. Exact: a dynamic program over the chain for each possible largest segment."""
    _check_chain(act, inp, cost)
    pts, total = [], float(sum(act))
    for cap in _caps(act):
        # a point is only worth having if its peak beats storing everything
        for _, _, segs in _fronts(act, inp, cost, cap, total - cap if cap else total):
            pts.append(evaluate(_merge(segs), act, inp, cost))
    pts.sort(key=lambda p: (p.peak, p.recompute))
    front, best_r = [], math.inf
    for p in pts:
        if p.recompute < best_r:
            front.append(p)
            best_r = p.recompute
    return front


def min_peak(act: Sequence[float], inp: Sequence[float], cost: Sequence[float] | None = None) -> float:
    """The smallest peak any plan reaches under the cost model."""
    _check_chain(act, inp, [0.0] * len(act) if cost is None else cost)
    return _min_peak_fast(act, inp)


def _min_peak_fast(act, inp) -> float:
    best = math.inf
    n = len(act)
    for cap in _caps(act):
        # least kept bytes with every checkpointed segment <= cap (a plain DP, no recompute axis)
        dp = [0.0] + [math.inf] * n
        for i in range(1, n + 1):
            dp[i] = dp[i - 1] + act[i - 1]
            j, tot = i - 1, act[i - 1]
            while j >= 0 and tot <= cap:
                dp[i] = min(dp[i], dp[j] + inp[j])
                j -= 1
                tot += act[j] if j >= 0 else 0
        best = min(best, dp[n] + cap)
    return best


def plan_for_budget(act: Sequence[float], inp: Sequence[float], cost: Sequence[float], budget: float) -> Plan:
    """The plan with the least recompute whose peak fits in ``budget`` (ties: smaller peak).

    Raises ValueError naming the smallest feasible budget when ``budget`` is below it."""
    n = _check_chain(act, inp, cost)
    best: Plan | None = None
    for cap in _caps(act):
        if cap > budget:
            break
        for _, _, segs in _fronts(act, inp, cost, cap, budget - cap):
            p = evaluate(_merge(segs), act, inp, cost)
            if p.peak <= budget and (best is None or (p.recompute, p.peak) < (best.recompute, best.peak)):
                best = p
    if best is None:
        lo = _min_peak_fast(act, inp)
        raise ValueError(
            f"budget={budget:g} is below the smallest peak any plan reaches for this "
            f"{n}-block chain ({lo:g}); raise the budget to at least {lo:g}"
        )
    return best
