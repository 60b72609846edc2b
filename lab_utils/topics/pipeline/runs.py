"""The rank-side harness: run a pipeline step function on this rank's stage, instruments attached.

    from lab_utils import launch
    from lab_utils.topics.pipeline import runs, stages

    def gpipe_step(stage, inputs, targets): ...      # a notebook cell: one step on one stage
    res = launch(runs.measure, 2, args=(gpipe_step, stages.Spec(), [1, 2, 4]))
    res[1]["runs"][4]["events"]       # stage 1's forwards and backwards, one list per repeat
    res[0]["runs"][4]["grads"]        # stage 0's gradient after one step (flattened)
    runs.torch_step("1F1B")           # a step function running torch's Schedule1F1B instead

A step function gets ``stage`` (this rank's part of the model, an nn.Module), ``inputs`` and
``targets`` (the m micro-batches; every rank gets them, only the first and last stage use their
values; the others use their shapes). It accumulates the gradient of the batch-mean loss into the
stage's parameters and returns nothing. Rank r runs stage r of ``dist.get_world_size()`` stages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

from lab_utils.comm import CommCounter
from lab_utils.launch import dist_info
from lab_utils.recompute import CallCounter
from lab_utils.topics.pipeline import stages, timeline, traffic, watch

__all__ = [
    "StepFn",
    "Checkpointed",
    "this_stage",
    "measure",
    "check_schedule",
    "torch_step",
    "measure_interleaved",
    "ddp_bytes",
]

StepFn = Callable[[nn.Module, list[torch.Tensor], list[torch.Tensor]], None]


class Checkpointed(nn.Module):
    """A stage that keeps only its input for backward and recomputes the rest (GPipe's
    re-materialisation): ``checkpoint(stage, x, use_reentrant=False)``."""

    def __init__(self, stage: nn.Module):
        super().__init__()
        self.stage = stage

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.stage, x, use_reentrant=False)


def this_stage(spec: stages.Spec, boundaries: Sequence[int] | None = None, *, ckpt: bool = False) -> nn.Module:
    """This rank's stage of ``stages.model(spec)`` (every rank builds the same seeded model)."""
    parts = stages.split(stages.model(spec), dist.get_world_size(), boundaries)
    stage = parts[dist.get_rank()]
    return Checkpointed(stage) if ckpt else stage


def _phase(rank: int, phase: str) -> None:
    st = watch.status(rank)  # None unless inside watch.naming_stages
    if st is not None:
        st.phase(phase)


def measure(
    step_fn: StepFn,
    spec: stages.Spec,
    ms: Sequence[int],
    *,
    repeats: int = 1,
    warmup: int = 1,
    boundaries: Sequence[int] | None = None,
    ckpt: bool = False,
) -> dict[str, Any]:
    """Run ``step_fn`` for each m in ``ms``: ``warmup`` untimed steps before the first m, then
    ``repeats`` recorded steps per m (gradients zeroed before each). Returns, per m: every
    repeat's events, the messages of the last step, this stage's gradient after one step, and the
    module forward calls of that step, normal and recomputed in backward."""
    rank, dev = dist.get_rank(), dist_info().device  # one GPU per stage under nccl
    stage = this_stage(spec, boundaries, ckpt=ckpt).to(dev)
    out: dict[str, Any] = {"stage": rank, "blocks": len(stage.stage if ckpt else stage), "runs": {}}
    for j, m in enumerate(ms):
        xs, ys = ([t.to(dev) for t in ts] for ts in stages.micro_batches(spec, m))
        for _ in range(warmup if j == 0 else 0):
            stage.zero_grad(set_to_none=True)
            _phase(rank, "step")
            with traffic.P2PCounter():  # counted only so that a hang here can be named (watch)
                step_fn(stage, xs, ys)
            _phase(rank, "done")
        events = []
        for _ in range(repeats):
            stage.zero_grad(set_to_none=True)
            dist.barrier()  # every rank's clock starts here
            _phase(rank, "step")
            with timeline.Recorder(stage, rank) as rec, traffic.P2PCounter() as sent, CallCounter(stage) as calls:
                step_fn(stage, xs, ys)
            _phase(rank, "done")
            events.append([e.as_dict() for e in rec.events])
        out["runs"][m] = {
            "events": events,
            "messages": [vars(msg) for msg in sent.messages],
            "grads": stages.flat_grads(stage).cpu(),
            "forward_calls": sum(calls.forward.values()),
            "recomputed": sum(calls.recomputed.values()),
        }
    dist.barrier()
    return out


def check_schedule(kind: str, m: int, p: int) -> None:
    """Raise ValueError, saying what to change, when schedule ``kind`` cannot run m micro-batches
    on p stages (before any rank starts, so nothing waits on a peer that gave up)."""
    if kind not in ("GPipe", "1F1B"):
        raise ValueError(f"kind={kind!r}: choose 'GPipe' or '1F1B'")
    if m < 1 or p < 1:
        raise ValueError(f"m={m}, p={p}: need at least one micro-batch and one stage")
    if kind == "1F1B" and m < p:
        raise ValueError(
            f"Schedule1F1B needs at least as many micro-batches as stages: m={m} < p={p}. "
            f"Use m >= {p} (or ScheduleGPipe, which runs any m)."
        )


def torch_step(kind: str) -> StepFn:
    """A step function running ``torch.distributed.pipelining``'s schedule ``kind`` ("GPipe" or
    "1F1B") on this rank's stage, with the same loss (mean over each micro-batch, gradients
    scaled by 1/m): a drop-in replacement for a hand-written step."""
    # Imported here, not at the top: torch.distributed.pipelining costs each rank ~1.5 s of imports
    # (it loads torch._dynamo), which a hand-written loop does not need.
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    schedules = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}
    check_schedule(kind, 1 if kind == "GPipe" else 10**9, 1)

    def step(stage: nn.Module, inputs: list[torch.Tensor], targets: list[torch.Tensor]) -> None:
        rank, p, m = dist.get_rank(), dist.get_world_size(), len(inputs)
        check_schedule(kind, m, p)
        # Every boundary carries activations of the micro-batch's shape (constant width); the
        # shapes are given, so the stage skips its shape-inference round (a forward on meta).
        act_in = inputs[0].detach().clone().requires_grad_(rank > 0)
        act_out = inputs[0].detach().clone().requires_grad_()
        pstage = PipelineStage(stage, rank, p, act_in.device, input_args=act_in, output_args=act_out)
        sched = schedules[kind](pstage, n_microbatches=m, loss_fn=stages.loss_fn)
        if rank == 0:
            sched.step(torch.cat(inputs), target=torch.cat(targets) if p == 1 else None)
        elif rank == p - 1:
            sched.step(target=torch.cat(targets))
        else:
            sched.step()

    step.__name__ = step.__qualname__ = f"torch_{kind}"
    return step


def measure_interleaved(spec: stages.Spec, m: int, *, chunks: int = 2) -> dict[str, Any]:
    """torch's ``ScheduleInterleaved1F1B`` with ``chunks`` stages per rank: the model is cut into
    p x chunks stages and rank r holds stages r, r + p, ... One untimed step, then one recorded.
    Returns this rank's events (all its stages, ``stage`` = the stage's index), the messages of
    the recorded step, and each of its stages' gradient by stage index."""
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B  # see torch_step

    rank, p, dev = dist.get_rank(), dist.get_world_size(), dist_info().device
    n = p * chunks
    parts = stages.split(stages.model(spec), n)
    mine = {rank + k * p: parts[rank + k * p].to(dev) for k in range(chunks)}
    xs, ys = ([t.to(dev) for t in ts] for ts in stages.micro_batches(spec, m))

    def step() -> None:
        local = []
        for idx, part in mine.items():
            act_in = xs[0].detach().clone().requires_grad_(idx > 0)
            act_out = xs[0].detach().clone().requires_grad_()
            local.append(PipelineStage(part, idx, n, dev, input_args=act_in, output_args=act_out))
        sched = ScheduleInterleaved1F1B(local, n_microbatches=m, loss_fn=stages.loss_fn)
        if rank == 0:
            sched.step(torch.cat(xs))
        elif rank == p - 1:
            sched.step(target=torch.cat(ys))
        else:
            sched.step()

    step()  # warm-up
    for part in mine.values():
        part.zero_grad(set_to_none=True)
    recorders = [timeline.Recorder(part, idx) for idx, part in mine.items()]
    dist.barrier()
    for rec in recorders:
        rec.__enter__()
    try:
        with traffic.P2PCounter() as sent:
            step()
    finally:
        for rec in recorders:
            rec.__exit__(None, None, None)
    events = sorted((e.as_dict() for rec in recorders for e in rec.events), key=lambda e: e["start"])
    # the recorders start a few microseconds apart: one origin for the rank
    t0 = min(rec.start for rec in recorders)
    for rec in recorders:
        for e in events:
            if e["stage"] == rec.index:
                e["start"] += rec.start - t0
                e["end"] += rec.start - t0
    out = {
        "events": events,
        "messages": [vars(msg) for msg in sent.messages],
        "grads": {idx: stages.flat_grads(part).cpu() for idx, part in mine.items()},
    }
    dist.barrier()
    return out


def ddp_bytes(spec: stages.Spec) -> dict[str, int]:
    """Bytes DDP's reducer all-reduces for one backward of the whole model on this rank's batch
    share (in all and per bucket), counted by ``lab_utils.comm.CommCounter`` on real DDP (run on
    every rank)."""
    dev = dist_info().device
    net = stages.model(spec).to(dev)
    ddp = DDP(net)
    counter = CommCounter()
    counter.attach(ddp)
    x, y = (t.to(dev) for t in stages.batch(spec))
    share = x.chunk(dist.get_world_size())[dist.get_rank()], y.chunk(dist.get_world_size())[dist.get_rank()]
    stages.loss_fn(ddp(share[0]), share[1]).backward()
    out = {
        "bytes": counter.summary()["bytes"],
        "buckets": [e.nbytes for e in counter.events],  # each bucket's all-reduce, in the order DDP ran them
        "param_bytes": sum(p.numel() * p.element_size() for p in net.parameters()),
    }
    del ddp, net
    return out
