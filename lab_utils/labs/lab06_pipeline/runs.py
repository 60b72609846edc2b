"""The rank-side harness: run a pipeline step function on this rank's stage, instruments attached.

    res = launch(runs.measure, 2, args=(gpipe_step, stages.Spec(), [1, 2, 4]))
    res[1].runs[4].events             # stage 1's forwards and backwards, one list per repeat
    res[0].runs[4].grads              # stage 0's gradient after one step (flattened)
    launch(runs.measure, 2, args=(gpipe_step, stages.Spec(), [4]), kwargs=dict(wrap=Checkpointed))
    launch(runs.ping_pong, 2, args=(96 * 1024,))[0]   # round trips of one message, wake-ups included

A step function (a lab cell) gets ``stage`` (rank r's stage r), ``inputs`` and ``targets`` (all m
micro-batches on every rank; the middle stages use only their shapes), accumulates the gradient
of the batch-mean loss into the stage's parameters and returns nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils import data
from lab_utils.comm import CommCounter
from lab_utils.env import dist_info
from lab_utils.flat import flat
from lab_utils.labs.lab06_pipeline import stages, timeline, traffic, watch
from lab_utils.labs.lab06_pipeline.records import DDPBytes, Interleaved, Run, StageRuns
from lab_utils.memory import nbytes
from lab_utils.memory.recompute import CallCounter

__all__ = [
    "StepFn",
    "ChunksStepFn",
    "this_stage",
    "measure",
    "measure_interleaved",
    "ping_pong",
    "ddp_bytes",
]

StepFn = Callable[[nn.Module, list[torch.Tensor], list[torch.Tensor]], None]
ChunksStepFn = Callable[[dict[int, nn.Module], list[torch.Tensor], list[torch.Tensor]], None]
Wrap = Callable[[nn.Module], nn.Module]


def this_stage(spec: stages.Spec, boundaries: Sequence[int] | None = None) -> nn.Module:
    """This rank's stage of ``stages.model(spec)`` (every rank builds the same seeded model)."""
    me = dist_info()
    return stages.split(stages.model(spec), me.world_size, boundaries)[me.rank]


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
    plain: int = 0,
    boundaries: Sequence[int] | None = None,
    wrap: Wrap | None = None,
) -> StageRuns:
    """Run ``step_fn`` for each m in ``ms`` (``warmup`` untimed steps first, then ``repeats``
    recorded ones; ``wrap(stage)`` replaces the stage, e.g. checkpointed). Per m: each repeat's
    events, live peak, messages and step seconds, the last step's gradient and forward calls (and
    recomputed). ``plain``: as many steps again with no instrument at all, each timed from the
    barrier to the step's return (a control for what the instruments cost), taken in turn with
    the recorded ones so that both see the same machine."""
    me = dist_info()
    rank, dev = me.rank, me.device  # one GPU per stage under nccl
    stage = this_stage(spec, boundaries)
    out = StageRuns(rank, len(stage), {})
    stage = (wrap(stage) if wrap is not None else stage).to(dev)
    for j, m in enumerate(ms):
        xs, ys = ([t.to(dev) for t in ts] for ts in stages.micro_batches(spec, m))
        for _ in range(warmup if j == 0 else 0):
            stage.zero_grad(set_to_none=True)
            _phase(rank, "step")
            with traffic.counter().track():  # counted only so that a hang here can be named (watch)
                step_fn(stage, xs, ys)
            _phase(rank, "done")
        events, live, messages, step_s, plain_s = [], [], [], [], []
        for i in range(max(repeats, plain)):
            if i < plain:
                stage.zero_grad(set_to_none=True)
                dist.barrier()
                t0 = time.perf_counter()
                step_fn(stage, xs, ys)
                plain_s.append(time.perf_counter() - t0)
            if i >= repeats:
                continue
            stage.zero_grad(set_to_none=True)
            dist.barrier()  # every rank's clock starts here
            _phase(rank, "step")
            with (
                timeline.Recorder(stage, rank) as rec,
                traffic.counter(rec.start).track() as sent,
                CallCounter(stage) as calls,
            ):
                step_fn(stage, xs, ys)
                step_s.append(time.perf_counter() - rec.start)
            _phase(rank, "done")
            events.append(rec.events)
            live.append(rec.live.peak)
            messages.append(sent.events)
        out.runs[m] = Run(
            events=events,
            live_peak=live,  # per repeat: the most bytes held for backward at once (measured live)
            messages=messages[-1],
            grads=flat(stage, grads=True),
            forward_calls=sum(calls.forward.values()),
            recomputed=sum(calls.recomputed.values()),
            messages_per_repeat=messages,
            step_s=step_s,
            plain_s=plain_s,
        )
    dist.barrier()
    return out


def measure_interleaved(step_fn: ChunksStepFn, spec: stages.Spec, m: int, *, repeats: int = 1) -> Interleaved:
    """Run ``step_fn(parts, inputs, targets)`` with two stages per rank (rank r holds
    ``parts = {r: ..., r + p: ...}`` of 2p stages, e.g. for ``ScheduleInterleaved1F1B``):
    one untimed step, then ``repeats`` recorded ones. Returns each repeat's events, the last
    step's messages, and its gradients by stage index."""
    me = dist_info()
    rank, p, dev = me.rank, me.world_size, me.device
    parts = stages.split(stages.model(spec), 2 * p)
    mine = {idx: parts[idx].to(dev) for idx in (rank, rank + p)}
    xs, ys = ([t.to(dev) for t in ts] for ts in stages.micro_batches(spec, m))
    step_fn(mine, xs, ys)  # warm-up
    per_repeat = []
    for _ in range(repeats):
        for part in mine.values():
            part.zero_grad(set_to_none=True)
        dist.barrier()
        with contextlib.ExitStack() as stack:
            recorders = [stack.enter_context(timeline.Recorder(part, idx)) for idx, part in mine.items()]
            with traffic.counter().track() as sent:
                step_fn(mine, xs, ys)
        t0 = min(rec.start for rec in recorders)  # the recorders start microseconds apart: one origin
        shifted = (
            dataclasses.replace(e, start=e.start + rec.start - t0, end=e.end + rec.start - t0)
            for rec in recorders
            for e in rec.events
        )
        per_repeat.append(sorted(shifted, key=lambda e: e.start))
    out = Interleaved(
        events=per_repeat,
        messages=sent.events,
        grads={idx: flat(part, grads=True) for idx, part in mine.items()},
    )
    dist.barrier()
    return out


def ping_pong(nbytes: int, rounds: int = 30, warmup: int = 3) -> list[float]:
    """A message's round trip: rank 0 sends ``nbytes`` (float32) to rank 1 with ``dist.send``,
    rank 1 sends them back, ``rounds`` times after ``warmup`` untimed ones. On rank 0, the
    seconds of each round trip (two messages, each waking its receiver); [] on the other ranks
    (ranks above 1 take no part). Run on every rank of a launch."""
    me = dist_info()
    buf = torch.zeros(nbytes // 4, device=me.device)
    out: list[float] = []
    dist.barrier()
    for i in range(warmup + rounds):
        if me.rank == 0:
            t0 = time.perf_counter()
            dist.send(buf, dst=1)
            dist.recv(buf, src=1)
            if i >= warmup:
                out.append(time.perf_counter() - t0)
        elif me.rank == 1:
            dist.recv(buf, src=0)
            dist.send(buf, dst=0)
    dist.barrier()
    return out


def ddp_bytes(spec: stages.Spec) -> DDPBytes:
    """Bytes real DDP all-reduces for one backward of the whole model on this rank's share (in all
    and per bucket, counted by ``CommCounter``), from its second backward: the first runs one
    bucket of every parameter (torch's ``nn/parallel/distributed.py``: ``bucket_size_limits =
    [sys.maxsize]``), and DDP rebuilds its buckets before the second. Run on every rank."""
    me = dist_info()
    net = stages.model(spec).to(me.device)
    ddp = DDP(net)
    counter = CommCounter()
    counter.attach(ddp)
    x, y = (t.to(me.device) for t in stages.batch(spec))
    (share,) = data.micro_batches(x, y, k=1, rank=me.rank, world_size=me.world_size)
    for _ in range(2):
        first = len(counter.events)
        stages.loss_fn(ddp(share[0]), share[1]).backward()
    second = counter.events[first:]  # the second backward's all-reduces, one per bucket, in DDP's order
    out = DDPBytes(
        bytes=sum(e.nbytes for e in second),
        buckets=[e.nbytes for e in second],
        param_bytes=nbytes(net.parameters()),
    )
    del ddp, net
    return out
