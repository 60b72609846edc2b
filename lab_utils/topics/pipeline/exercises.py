"""Graders of lab 6's exercises: each measures the student's code against its own reference.

from lab_utils.topics.pipeline import exercises
exercises.check_fill_drain(gpipe_step)   # on 3 real ranks: gradients, order, its own sends/recvs
exercises.check_choose_m(choose_m)       # against the smallest m meeting both limits
exercises.check_balance(balance)         # boundaries against the best split of measured FLOPs
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

import lab_utils
from lab_utils.checks import grader
from lab_utils.launch import launch
from lab_utils.memory import SavedTensorMeter
from lab_utils.recompute import count_flops
from lab_utils.topics.pipeline import runs, stages, timeline, watch

__all__ = ["check_fill_drain", "check_choose_m", "check_balance", "best_split", "block_flops"]

FILL_DRAIN_SPEC = stages.Spec(depth=6, width=32, batch=16, dtype=torch.float64)
FILL_DRAIN_P, FILL_DRAIN_M = 3, 4
HANG_TIMEOUT = 45.0  # launch's own limit, start-up included: a safety net
STALL_S = 10.0  # a send or receive waiting this long names the hang (watch.naming_stages)
UNEVEN = stages.Spec(width=64, batch=32, hidden=(256, 256, 128, 64, 64, 64, 64, 64))


_NOT_YOURS = tuple(os.path.dirname(mod.__file__) + os.sep for mod in (torch, lab_utils))


def _own(caller: str) -> bool:
    """Whether a message was sent by code outside torch and lab_utils (the student's loop)."""
    return not caller.startswith(_NOT_YOURS)


def _fill_drain_run(step: runs.StepFn) -> dict[str, Any]:
    return runs.measure(step, FILL_DRAIN_SPEC, [FILL_DRAIN_M], warmup=0)


@grader(
    "Exercise 1 · fill-drain on p stages",
    hint="reread section 1: a middle stage receives from rank - 1 and sends to rank + 1 in the forwards, "
    "then receives the gradient from rank + 1 and sends its input's gradient to rank - 1 in the backwards; "
    "only the last stage computes the loss, divided by m",
)
def check_fill_drain(gpipe_step: runs.StepFn) -> str:
    p, m = FILL_DRAIN_P, FILL_DRAIN_M
    try:
        with watch.naming_stages(stall_s=STALL_S):
            got = launch(_fill_drain_run, p, args=(gpipe_step,), timeout=HANG_TIMEOUT)
    except watch.StageHang as err:
        why = str(err).split("\n\n")[0]
        raise AssertionError(f"the stages were still waiting after {STALL_S:g} s: {why}") from None
    runs_ = [r["runs"][m] for r in got]
    grads = torch.cat([r["grads"] for r in runs_])
    ref = stages.reference_grads(FILL_DRAIN_SPEC)
    gap = (grads - ref).abs().max().item()
    assert gap <= 1e-12, f"the gradients are {gap:.1e} away from one large batch in one process (float64)"
    want = [f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)]
    for s, r in enumerate(runs_):
        seen = timeline.order(r["events"][0])
        assert seen == want, f"stage {s} ran {seen}; GPipe runs every forward, then every backward: {want}"
    act = FILL_DRAIN_SPEC.batch // m * FILL_DRAIN_SPEC.width * 8
    for s, r in enumerate(runs_):
        msgs = r["messages"]
        others = sorted({os.path.basename(msg["caller"]) for msg in msgs if not _own(msg["caller"])})
        assert not others, (
            f"stage {s}'s messages were sent by {others}, not by your loop: call dist.send / dist.recv "
            "(or isend / irecv) yourself"
        )
        # fill-drain: per micro-batch, activations come from s - 1 and go to s + 1; then gradients back
        fwd = [("recv", s - 1)] * (s > 0) + [("send", s + 1)] * (s < p - 1)
        bwd = [("recv", s + 1)] * (s < p - 1) + [("send", s - 1)] * (s > 0)
        seen = [(msg["op"], msg["peer"]) for msg in msgs]
        want = fwd * m + bwd * m
        assert sorted(seen[: len(fwd) * m]) == sorted(fwd * m) and sorted(seen) == sorted(want), (
            f"stage {s}'s messages (op, peer) were {seen}; fill-drain expects {want}: "
            "one receive and one send per micro-batch in the forwards, then the same back in the backwards"
        )
        wrong = [msg for msg in msgs if msg["nbytes"] != act]
        assert not wrong, f"stage {s} moved {wrong[0]['nbytes']} bytes at once; one micro-batch's activations are {act}"
    return f"{p} ranks: large-batch gradients (max diff {gap:.0e}), F then B on every stage, {2 * (p - 1) * m} messages"


def _reference_m(p: int, batch: int, bytes_per_sample: float, budget: float, max_bubble: float) -> int | None:
    """The smallest m dividing ``batch`` with GPipe's bubble <= ``max_bubble`` and 1F1B's
    activations in flight on stage 0 (min(m, p) micro-batches) <= ``budget``; None if none."""
    for m in range(1, batch + 1):
        if (
            batch % m == 0
            and timeline.formula(p, m) <= max_bubble
            and min(m, p) * (batch // m) * bytes_per_sample <= budget
        ):
            return m
    return None


def _bytes_per_sample() -> float:
    spec = stages.Spec(depth=4, width=64, batch=16)
    stage = stages.split(stages.model(spec), 2)[0]
    x, _ = stages.batch(spec)
    with SavedTensorMeter(stage, exclude=[x]) as meter:
        stage(x)
    return meter.total_bytes / spec.batch


@grader(
    "Exercise 2 · choose m for a memory budget and a bubble limit",
    hint="reread section 4: the bubble falls as m grows, and under 1F1B stage 0 keeps min(m, p) micro-batches "
    "of batch / m samples; try the divisors of the batch from the smallest up",
)
def check_choose_m(choose_m: Callable[..., int | None]) -> str:
    bps = _bytes_per_sample()  # measured: what one sample's forward keeps on one stage
    whole = 64 * bps
    cases = [
        (2, 64, bps, whole, 0.25),
        (2, 64, bps, whole / 8, 0.25),
        (4, 64, bps, whole / 2, 0.5),
        (4, 64, bps, whole / 16, 0.2),
        (4, 48, bps, 48 * bps, 0.05),
        (2, 64, bps, bps / 2, 0.5),  # not even one sample fits: no m works
    ]
    for args in cases:
        want, got = _reference_m(*args), choose_m(*args)
        p, batch, _, budget, max_bubble = args
        assert got == want, (
            f"p={p}, batch={batch}, budget={budget / bps:g} samples' activations, max_bubble={max_bubble}: "
            f"you chose m={got!r}, the smallest m meeting both is {want!r}"
        )
    return f"{len(cases)} cases, activations measured at {bps:.0f} bytes per sample per stage"


def block_flops(spec: stages.Spec) -> list[int]:
    """FLOPs of one forward + backward of each block of ``spec`` on its batch (measured by
    ``lab_utils.recompute.count_flops``)."""
    net = stages.model(spec)
    x, _ = stages.batch(spec)
    out = []
    for block in net:
        xi = x.clone().requires_grad_()
        out.append(int(count_flops(lambda b=block, xi=xi: b(xi).sum().backward())))
        x = block(x).detach()
    return out


def best_split(costs: Sequence[float], p: int) -> float:
    """The smallest possible cost of the most loaded stage, over every contiguous split."""
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), p - 1):
        edges = [0, *cuts, n]
        best = min(best, max(sum(costs[a:b]) for a, b in zip(edges, edges[1:])))
    return best


@grader(
    "Exercise 3 · move the stage boundaries to balance the pipeline",
    hint="reread section 3: a pipeline runs at the pace of its slowest stage; try every place for the "
    "boundaries (or grow each stage until adding the next block would overshoot) and keep the split "
    "whose most expensive stage is cheapest",
)
def check_balance(balance: Callable[[list[float], int], Sequence[int]]) -> str:
    measured = block_flops(UNEVEN)
    cases = [(measured, 2), (measured, 3), ([1, 1, 1, 1, 10, 1], 2), ([5, 1, 1, 1, 1, 1, 1, 1], 3), ([2, 2, 2, 2], 4)]
    for costs, p in cases:
        cuts = list(balance(list(costs), p))
        n = len(costs)
        edges = [0, *cuts, n]
        assert len(cuts) == p - 1 and all(a < b for a, b in zip(edges, edges[1:])), (
            f"for {n} blocks and p={p} you returned boundaries {cuts}: give {p - 1} increasing indices in 1..{n - 1}"
        )
        worst = max(sum(costs[a:b]) for a, b in zip(edges, edges[1:]))
        best = best_split(costs, p)
        assert worst == best, (
            f"costs {list(costs)}, p={p}: your boundaries {cuts} leave {worst:g} on the busiest stage; "
            f"the best split leaves {best:g}"
        )
    even = max(sum(measured[a:b]) for a, b in zip([0, 4], [4, 8]))
    share = best_split(measured, 2) / even
    return f"on the measured model your 2 stages' busiest does {share:.0%} of the work of an even split's"
