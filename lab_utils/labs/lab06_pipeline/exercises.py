"""Graders of lab 6's exercises: each measures the student's code against its own reference.

from lab_utils.labs.lab06_pipeline import exercises
exercises.check_fill_drain(gpipe_step)   # on 3, then 4 real ranks: gradients, order, its own sends/recvs
exercises.check_choose_m(choose_m)       # the chosen m's measured memory and order under 1F1B, 2 ranks
exercises.check_balance(balance)         # the chosen boundaries run on 2 ranks, FLOPs per stage counted
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Sequence

import torch

import lab_utils
from lab_utils.checks import grader, max_abs_diff
from lab_utils.env import dist_info
from lab_utils.labs.lab06_pipeline import runs, stages, timeline, watch
from lab_utils.labs.lab06_pipeline.records import StageRuns
from lab_utils.launcher import launch
from lab_utils.memory import SavedTensorMeter, fmt_bytes
from lab_utils.memory.recompute import count_flops

__all__ = ["check_fill_drain", "check_choose_m", "check_balance", "best_split", "block_flops", "schedule_step"]

FILL_DRAIN_SPEC = stages.Spec(depth=6, width=32, batch=16, dtype=torch.float64)
FILL_DRAIN_PS, FILL_DRAIN_M = (3, 4), 4  # 4 ranks: a loop hard-coding one middle stage fails
HANG_TIMEOUT = 45.0  # launch's own limit, start-up included: a safety net
STALL_S = 10.0  # a send or receive waiting this long names the hang (watch.naming_stages)
UNEVEN = stages.Spec(width=64, batch=32, hidden=(256, 256, 128, 64, 64, 64, 64, 64))
CHOOSE_SPEC = stages.Spec(depth=4, width=64, batch=64)  # pipe-choose-m's pipeline: 2 stages, 1F1B
CHOOSE_P = 2
# a message sent from code inside torch or lab_utils was not sent by the student's loop
_NOT_YOURS = tuple(os.path.dirname(mod.__file__) + os.sep for mod in (torch, lab_utils))


def _fill_drain_run(step: runs.StepFn) -> StageRuns:
    return runs.measure(step, FILL_DRAIN_SPEC, [FILL_DRAIN_M], warmup=0)


@grader(
    "pipe-fill-drain",
    "fill-drain on p stages",
    hint="reread section 1: a middle stage receives from rank - 1 and sends to rank + 1 in the forwards, "
    "then receives the gradient from rank + 1 and sends its input's gradient to rank - 1 in the backwards; "
    "only the last stage computes the loss, divided by m",
)
def check_fill_drain(gpipe_step: runs.StepFn) -> str:
    done = []
    for p in FILL_DRAIN_PS:
        try:
            done.append(_grade_fill_drain(gpipe_step, p))
        except AssertionError as err:
            raise AssertionError(f"on {p} ranks: {err}") from None
    gaps, live = zip(*done)
    return (
        f"{' and '.join(map(str, FILL_DRAIN_PS))} ranks: large-batch gradients (max diff {max(gaps):.0e}), "
        f"F then B on every stage, {' and '.join(str(2 * (p - 1) * FILL_DRAIN_M) for p in FILL_DRAIN_PS)} "
        f"messages; held for backward at the worst moment (measured live, "
        f"{FILL_DRAIN_PS[-1]} ranks): {live[-1]}"
    )


def _grade_fill_drain(gpipe_step: runs.StepFn, p: int) -> tuple[float, str]:
    """Run ``gpipe_step`` on ``p`` ranks and assert each part of the fill-drain; -> (the gradient's
    max difference, each stage's bytes held for backward at the worst moment)."""
    m = FILL_DRAIN_M
    try:
        with watch.naming_stages(stall_s=STALL_S):
            got = launch(_fill_drain_run, p, args=(gpipe_step,), timeout=HANG_TIMEOUT)
    except watch.StageHang as err:
        why = str(err).split("\n\n")[0]
        raise AssertionError(f"the stages were still waiting after {STALL_S:g} s: {why}") from None
    runs_ = [r.runs[m] for r in got]
    grads = torch.cat([r.grads for r in runs_])
    ref = stages.reference_grads(FILL_DRAIN_SPEC)
    gap = max_abs_diff(grads, ref)
    assert gap <= 1e-12, f"the gradients are {gap:.1e} away from one large batch in one process (float64)"
    forwards = [f"F{i}" for i in range(m)]
    for s, r in enumerate(runs_):
        seen = timeline.order(r.events[0])
        backwards = sum(piece.startswith("B") for piece in seen)
        assert backwards == m, (
            f"stage {s} ran {seen}: one backward() per micro-batch (the recorder times each): "
            f"{backwards} seen, {m} expected"
        )
        # any drain order is a fill-drain (same gradient, bubble and memory): only forwards-first matters
        assert seen[:m] == forwards and sorted(seen[m:]) == sorted(f"B{i}" for i in range(m)), (
            f"stage {s} ran {seen}; GPipe runs every forward ({' '.join(forwards)}), then every backward"
        )
    act = FILL_DRAIN_SPEC.batch // m * FILL_DRAIN_SPEC.width * 8
    for s, r in enumerate(runs_):
        msgs = r.messages
        others = sorted({os.path.basename(msg.caller) for msg in msgs if msg.caller.startswith(_NOT_YOURS)})
        assert not others, (
            f"stage {s}'s messages were sent by {others}, not by your loop: call dist.send / dist.recv "
            "(or isend / irecv) yourself"
        )
        # fill-drain: per micro-batch, activations come from s - 1 and go to s + 1; then gradients back
        fwd = [("recv", s - 1)] * (s > 0) + [("send", s + 1)] * (s < p - 1)
        bwd = [("recv", s + 1)] * (s < p - 1) + [("send", s - 1)] * (s > 0)
        seen = [(msg.op, msg.peer) for msg in msgs]
        want = fwd * m + bwd * m
        assert sorted(seen[: len(fwd) * m]) == sorted(fwd * m) and sorted(seen) == sorted(want), (
            f"stage {s}'s messages (op, peer) were {seen}; fill-drain expects {want}: "
            "one receive and one send per micro-batch in the forwards, then the same back in the backwards"
        )
        wrong = [msg for msg in msgs if msg.nbytes != act]
        assert not wrong, f"stage {s} moved {wrong[0].nbytes} bytes at once; one micro-batch's activations are {act}"
    return gap, ", ".join(fmt_bytes(r.live_peak[0]) for r in runs_)


def schedule_step(kind: str, stage: torch.nn.Module, inputs: list, targets: list) -> None:
    """One step of torch's ``ScheduleGPipe`` or ``Schedule1F1B`` (``kind``) on this rank's stage:
    the graders' own copy of the lab's ``torch_step`` cell (bind ``kind`` with functools.partial)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    me = dist_info()
    rank, p, m = me.rank, me.world_size, len(inputs)
    act_in = inputs[0].detach().clone().requires_grad_(rank > 0)
    act_out = inputs[0].detach().clone().requires_grad_()
    pstage = PipelineStage(stage, rank, p, act_in.device, input_args=act_in, output_args=act_out)
    sched = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[kind](pstage, n_microbatches=m, loss_fn=stages.loss_fn)
    if rank == 0:
        sched.step(torch.cat(inputs))
    elif rank == p - 1:
        sched.step(target=torch.cat(targets), return_outputs=False)
    else:
        sched.step()


def _reference_m(p: int, batch: int, bytes_per_sample: float, budget: float, max_bubble: float) -> int | None:
    """The smallest m dividing ``batch``, at least p (torch's Schedule1F1B refuses fewer), with
    GPipe's bubble <= ``max_bubble`` and 1F1B's activations in flight on stage 0 (min(m, p)
    micro-batches) <= ``budget``; None if none."""
    for m in range(p, batch + 1):
        if (
            batch % m == 0
            and timeline.formula(p, m) <= max_bubble
            and min(m, p) * (batch // m) * bytes_per_sample <= budget
        ):
            return m
    return None


def _run_1f1b(ms: Sequence[int]) -> StageRuns:
    return runs.measure(functools.partial(schedule_step, "1F1B"), CHOOSE_SPEC, ms, warmup=0)


@functools.cache
def _measured_1f1b() -> dict[int, tuple[int, float]]:
    """Schedule1F1B run on 2 real ranks for every m (>= 2) dividing the batch, once per process:
    m -> (stage 0's bytes held for backward at the worst moment (live), the bubble of the order it ran)."""
    ms = [m for m in range(CHOOSE_P, CHOOSE_SPEC.batch + 1) if CHOOSE_SPEC.batch % m == 0]
    got = launch(_run_1f1b, CHOOSE_P, args=(ms,), timeout=120)
    return {m: (got[0].runs[m].live_peak[0], timeline.median_bubble(got, m, slots=True)) for m in ms}


@grader(
    "pipe-choose-m",
    "choose m for a memory budget and a bubble limit",
    hint="reread section 4: the formula's bubble (p - 1) / (m + p - 1) falls as m grows; under 1F1B stage 0 "
    "keeps min(m, p) micro-batches of batch / m samples, and torch's Schedule1F1B refuses m < p; try the divisors "
    "of the batch from p up",
)
def check_choose_m(choose_m: Callable[..., int | None]) -> str:
    p, batch = CHOOSE_P, CHOOSE_SPEC.batch
    bps = _bytes_per_sample()  # what one sample's forward keeps on stage 0 (one process, metered)
    cases = [(0.5, batch), (0.34, batch), (0.25, batch / 4), (0.05, batch), (0.5, 1)]  # (max_bubble, samples)
    cases.append((0.2, batch))  # m=4 idles exactly 1/5 at p=2: "at most", not "below" (8)
    # the student's answers first: a stub stops here, before any rank starts
    answers = [choose_m(p, batch, bps, samples * bps, max_bubble) for max_bubble, samples in cases]
    measured = _measured_1f1b()
    for (max_bubble, samples), got in zip(cases, answers):
        budget = samples * bps
        want = _reference_m(p, batch, bps, budget, max_bubble)
        case = f"p={p}, batch={batch}, budget={samples:g} samples' activations, max_bubble={max_bubble}"
        if got is not None and got not in measured:
            raise AssertionError(
                f"{case}: you chose m={got!r}, which torch's Schedule1F1B cannot run here: m must divide the "
                f"batch and be at least p={p} (torch raises 'Number of microbatches ... must be greater than or "
                "equal to the number of stages')"
            )
        if got is not None:
            live, order = measured[got]
            assert live <= budget and order <= max_bubble + 1e-12, (
                f"{case}: you chose m={got}; run as 1F1B it held {fmt_bytes(live)} on stage 0 (budget "
                f"{fmt_bytes(budget)}) and its order idles {order:.1%} of the step"
            )
        if got != want:
            if want is None:
                raise AssertionError(f"{case}: you chose m={got!r}, but no m meets both limits here")
            live, order = measured[want]
            raise AssertionError(
                f"{case}: you chose m={got!r}; m={want} meets both (measured under 1F1B: {fmt_bytes(live)} on "
                f"stage 0, its order idles {order:.1%}): the smallest m meeting both is {want}"
            )
    shown = ", ".join(f"m={m} {fmt_bytes(b)}" for m, (b, _) in sorted(measured.items()))
    return f"{len(cases)} cases, your m run as 1F1B on {p} ranks (stage 0 held: {shown})"


def _bytes_per_sample() -> float:
    stage = stages.split(stages.model(CHOOSE_SPEC), CHOOSE_P)[0]
    x, _ = stages.batch(CHOOSE_SPEC)
    with SavedTensorMeter(stage, exclude=[x]) as meter:
        stage(x)
    return meter.total_bytes / CHOOSE_SPEC.batch


def block_flops(spec: stages.Spec) -> list[int]:
    """FLOPs of one forward + backward of each block of ``spec`` on its batch (measured by
    ``lab_utils.memory.recompute.count_flops``), as in a pipeline: the first block's backward computes no
    gradient for the data, every later one does for its input."""
    net = stages.model(spec)
    x, _ = stages.batch(spec)
    out = []
    for i, block in enumerate(net):
        xi = x.clone().requires_grad_(i > 0)
        out.append(int(count_flops(lambda b=block, xi=xi: b(xi).sum().backward())))
        x = block(x).detach()
    return out


def _busiest(costs: Sequence[float], cuts: Sequence[int]) -> float:
    """The cost of the most loaded stage when the blocks are cut at ``cuts``."""
    return max(sum(costs[a:b]) for a, b in itertools.pairwise([0, *cuts, len(costs)]))


def best_split(costs: Sequence[float], p: int) -> float:
    """The smallest possible cost of the most loaded stage, over every contiguous split."""
    return min(_busiest(costs, cuts) for cuts in itertools.combinations(range(1, len(costs)), p - 1))


@grader(
    "pipe-balance",
    "move the stage boundaries to balance the pipeline",
    hint="reread section 3: a pipeline runs at the pace of its slowest stage; try every place for the "
    "boundaries and keep the split whose most expensive stage is cheapest",
)
def check_balance(balance: Callable[[list[float], int], Sequence[int]]) -> str:
    measured = block_flops(UNEVEN)
    cases = [(measured, 2), (measured, 3), ([1, 1, 1, 1, 10, 1], 2), ([5, 1, 1, 1, 1, 1, 1, 1], 3), ([2, 2, 2, 2], 4)]
    cases.append(([1, 8, 5, 4, 10, 2], 4))  # busiest 10; the smallest max - min (or sum of squares) leaves 12
    for costs, p in cases:
        cuts = list(balance(list(costs), p))
        n = len(costs)
        edges = [0, *cuts, n]
        assert len(cuts) == p - 1 and all(a < b for a, b in zip(edges, edges[1:])), (
            f"for {n} blocks and p={p} you returned boundaries {cuts}: give {p - 1} increasing indices in 1..{n - 1}"
        )
        worst = _busiest(costs, cuts)
        best = best_split(costs, p)
        assert worst == best, (
            f"costs {list(costs)}, p={p}: your boundaries {cuts} leave {worst:g} on the busiest stage; "
            f"the best split leaves {best:g}"
        )
    cuts = list(balance(list(measured), 2))
    ran = launch(_balanced_run, 2, args=(cuts,), timeout=120)  # your boundaries, as a real pipeline
    flops = [r["flops"] for r in ran]
    assert max(flops) == best_split(measured, 2), (
        f"run on 2 ranks with your boundaries {cuts}, the stages computed {[f / 1e6 for f in flops]} MFLOPs; "
        f"the best split leaves {best_split(measured, 2) / 1e6:g} MFLOPs on the busiest"
    )
    even = _busiest(measured, [4])
    return (
        f"run on 2 ranks with boundaries {cuts}: {' and '.join(f'{f / 1e6:.1f}' for f in flops)} MFLOPs per stage "
        f"(counted), the busiest {max(flops) / even:.0%} of an even split's"
    )


def _balanced_run(boundaries: Sequence[int]) -> dict[str, int]:
    """One GPipe step (torch's schedule, 4 micro-batches) of ``UNEVEN`` cut at ``boundaries`` on this
    rank: the FLOPs its stage computed (counted while it ran)."""
    stage = runs.this_stage(UNEVEN, boundaries)
    xs, ys = stages.micro_batches(UNEVEN, 4)
    return {"flops": count_flops(lambda: schedule_step("GPipe", stage, xs, ys))}
