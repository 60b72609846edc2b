"""The planner: which blocks of a chain to checkpoint for a memory budget, with least recompute.

    plan = planner.plan_for_budget(act, inp, cost, budget=2**20)   # least recompute that fits
    planner.optimal_front(act, inp, cost)    # every plan no other beats on both peak and recompute

Block i keeps ``act[i]`` bytes when stored, has an input of ``inp[i]`` bytes and a forward of
``cost[i]``; a checkpointed segment keeps only ``inp[start]`` and runs again once in backward.
Backward frees each segment once done, so the peak is position-aware (out(j): the gradient
arriving at segment j's output, the next block's input size):

    kept      = sum(act over stored blocks) + sum(inp[start] over checkpointed segments)
    alive(j)  = kept by the segments before j + sum(act over segment j) + out(j)
    peak      = max(kept + in_flight, max over checkpointed j of alive(j))
    recompute = sum(cost over checkpointed blocks)   (full forwards: an upper bound where early
                stop skips a block's last ops, e.g. a transformer block's fc_out)

``in_flight``: what backward holds on top at its start (measure it from a plain step: allocator
peak less kept); temporaries are left out. Uniform blocks, k segments: peak = (k-1) + N/k + 1,
least near k = sqrt(N) (Chen et al., 2016).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from lab_utils.labs.lab01_checkpointing.schedules import Segment, check_segments

__all__ = ["SegmentPlan", "evaluate", "optimal_front", "min_peak", "plan_for_budget"]


@dataclass(frozen=True)
class SegmentPlan:
    """A schedule and its cost under the model in the module docstring."""

    segments: tuple[Segment, ...]
    kept: float
    peak: float
    recompute: float

    @property
    def checkpointed_blocks(self) -> list[int]:
        return [i for s, e, m in self.segments if m != "store" for i in range(s, e)]


def _check_chain(act: Sequence[float], inp: Sequence[float], cost: Sequence[float], in_flight: float = 0.0) -> int:
    n = len(act)
    if n == 0 or len(inp) != n or len(cost) != n:
        raise ValueError(f"act, inp and cost need the same non-zero length (got {len(act)}, {len(inp)}, {len(cost)})")
    if min(act) < 0 or min(inp) < 0 or min(cost) < 0:
        raise ValueError("act, inp and cost must be non-negative")
    if in_flight < 0:
        raise ValueError(f"in_flight={in_flight:g}: bytes held at the backward's start, must be >= 0")
    return n


def evaluate(
    segments: Sequence[Segment],
    act: Sequence[float],
    inp: Sequence[float],
    cost: Sequence[float],
    in_flight: float = 0.0,
) -> SegmentPlan:
    """Kept bytes, peak bytes and recompute cost of ``segments`` under the cost model
    (``in_flight``: bytes the backward holds on top of everything kept at its start)."""
    _check_chain(act, inp, cost, in_flight)
    check_segments(segments, len(act))
    kept = rec = peak = 0.0
    for s, e, m in segments:
        if m == "store":
            kept += sum(act[s:e])
        else:  # rebuilt while only the segments before it keep, as its output's gradient arrives
            peak = max(peak, kept + sum(act[s:e]) + _out(inp, e))
            kept += inp[s]
            rec += sum(cost[s:e])
    return SegmentPlan(tuple(segments), kept, max(peak, kept + in_flight), rec)


def _out(inp: Sequence[float], e: int) -> float:
    """Bytes of the gradient that reaches a segment ending at block e: the size of its output (the
    next block's input; the last block's output is taken to be the size of its input)."""
    return inp[e] if e < len(inp) else inp[-1]


def _states(
    act, inp, cost, budget: float = math.inf, in_flight: float = 0.0
) -> list[tuple[float, float, float, tuple]]:
    """The dynamic program over prefixes: states (kept, peak so far, recompute, segments), those
    beaten on all three dropped; over ``budget`` dropped as they appear (kept up to ``budget - in_flight``)."""
    kept_cap = budget - in_flight
    n = len(act)
    pa, pc = list(accumulate(act, initial=0.0)), list(accumulate(cost, initial=0.0))
    states: list[list[tuple[float, float, float, tuple]]] = [[(0.0, 0.0, 0.0, ())]]
    for i in range(1, n + 1):
        cands = []
        for k, pk, r, segs in states[i - 1]:  # block i - 1 stored
            if k + act[i - 1] <= kept_cap:
                cands.append((k + act[i - 1], pk, r, segs + ((i - 1, i, "store"),)))
        for j in range(i):  # blocks j..i-1 one checkpointed segment
            seg_act, seg_cost = pa[i] - pa[j], pc[i] - pc[j]
            for k, pk, r, segs in states[j]:
                alive = k + seg_act + _out(inp, i)
                if alive <= budget and k + inp[j] <= kept_cap:
                    cands.append((k + inp[j], max(pk, alive), r + seg_cost, segs + ((j, i, "full"),)))
        states.append(_pareto(cands))
    return states[n]


def _pareto(cands):
    cands.sort(key=lambda t: (t[0], t[1], t[2]))
    out: list = []
    for c in cands:  # keep c unless a kept state is no worse on all three axes
        if not any(o[0] <= c[0] and o[1] <= c[1] and o[2] <= c[2] for o in out):
            out.append(c)
    return out


def _merge(segs: tuple) -> tuple[Segment, ...]:
    """Join neighbouring stored blocks into one stored segment (same cost, easier to read)."""
    out: list[Segment] = []
    for s, e, m in segs:
        if out and m == "store" and out[-1][2] == "store":
            out[-1] = (out[-1][0], e, "store")
        else:
            out.append((s, e, m))
    return tuple(out)


def optimal_front(
    act: Sequence[float], inp: Sequence[float], cost: Sequence[float], in_flight: float = 0.0
) -> list[SegmentPlan]:
    """Every plan on the optimal memory/recompute front (least recompute for its peak), sorted
    by peak. Exact: a dynamic program over the chain (see ``_states``)."""
    _check_chain(act, inp, cost, in_flight)
    pts = sorted(
        (evaluate(_merge(segs), act, inp, cost, in_flight) for *_, segs in _states(act, inp, cost)),
        key=lambda p: (p.peak, p.recompute),
    )
    front, best_r = [], math.inf
    for p in pts:
        if p.recompute < best_r:
            front.append(p)
            best_r = p.recompute
    return front


def min_peak(act: Sequence[float], inp: Sequence[float], in_flight: float = 0.0) -> float:
    """The smallest peak any plan reaches under the cost model (recompute costs play no part)."""
    n = _check_chain(act, inp, [0.0] * len(act), in_flight)
    return min(max(k + in_flight, pk) for k, pk, *_ in _states(act, inp, [0.0] * n))


def plan_for_budget(
    act: Sequence[float], inp: Sequence[float], cost: Sequence[float], budget: float, in_flight: float = 0.0
) -> SegmentPlan:
    """The plan with the least recompute whose peak fits in ``budget`` (ties: smaller peak).

    Raises ValueError naming the smallest feasible budget when ``budget`` is below it."""
    n = _check_chain(act, inp, cost, in_flight)
    states = _states(act, inp, cost, budget, in_flight)
    plans = [evaluate(_merge(segs), act, inp, cost, in_flight) for *_, segs in states]
    if not plans:
        lo = min_peak(act, inp, in_flight=in_flight)
        raise ValueError(
            f"budget={budget:g} is below the smallest peak any plan reaches for this "
            f"{n}-block chain ({lo:g}); raise the budget to at least {lo:g}"
        )
    return min(plans, key=lambda p: (p.recompute, p.peak))
