"""Time per update against K: compute and bucket-ready times stamped on the ranks, the overlap
model (``lab_utils.netmodel``) on a modelled link, and the same loops on an emulated link. The
emulator queues transfers by the model's own rule, so it is a demo, not a validation: that is
``reallink``, against a real link.

    loops = {"naive": naive_update, "no_sync": no_sync_update}      # the notebook's loops (training functions)
    res = launch(sweep.measure, 2, args=(loops,), kwargs={"ks": (1, 2, 4), "rounds": (1, 3)})
    sweep.update_seconds(res[0], LINKS["10GbE"])   # {"k", "compute", "naive", "no_sync"}: seconds (model)
    sweep.validation(res)                     # emulated wall clock against the model, per link/loop/K
    sweep.savings(res[0])                     # naive - no_sync per paired repeat: median, min, max
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from lab_utils.data import micro_batches
from lab_utils.env import dist_info
from lab_utils.labs.lab03_ddp.emulate import LinkHook, MicroStamps
from lab_utils.labs.lab03_ddp.workload import DEFAULT, Setup, UpdateFn, dataset, model, wrap
from lab_utils.netmodel import (
    Bucket,
    Link,
    MicroStep,
    lockstep_update_seconds,
    naive_update_seconds,
    no_sync_update_seconds,
)
from lab_utils.timing import Timer

__all__ = ["Run", "Sweep", "Row", "Saving", "measure", "micro_step", "update_seconds", "validation", "savings"]


@dataclass(frozen=True)
class Run:
    """One emulated link, K and loop on this rank: each repeat's wall clock and micro-steps' stamps."""

    link: Link
    k: int
    loop: str
    wall_s: list[float]
    micro: list[list[MicroStamps]]


@dataclass(frozen=True)
class Sweep:
    """What ``measure`` stamped on one rank: the synchronised micro-steps on loopback, the
    optimizer step (fastest of its repeats) and the emulated runs."""

    loops: list[str]
    ks: list[int]
    loopback: list[MicroStamps]
    optimizer_step_s: float
    emulated: list[Run]
    world_size: int
    backend: str


@dataclass(frozen=True)
class Row:
    """One emulated run against the model (``validation``): the median repeat's wall clock, the
    overlap model and the old sum fed its stamps, and the model for the typical micro-step."""

    link: str
    k: int
    loop: str
    measured_s: float
    model_s: float
    old_sum_s: float
    error: float
    old_sum_error: float
    repeats: int
    typical_s: float
    buckets: int


@dataclass(frozen=True)
class Saving:
    """naive - no_sync on one emulated link and K (``savings``): paired repeats, and the model."""

    link: str
    k: int
    repeats: int
    median_s: float
    min_s: float
    max_s: float
    model_s: float


def _copy(stamps: Sequence[MicroStamps]) -> list[MicroStamps]:
    return [replace(s, buckets=list(s.buckets), transfers=list(s.transfers)) for s in stamps]


def measure(
    loops: Mapping[str, UpdateFn],
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    rounds: Sequence[float] = (),
    latency_s: float = 50e-6,
    repeats: int = 3,
    bucket_cap_mb: float | None = None,
    setup: Setup = DEFAULT,
) -> Sweep:
    """On this rank (call it on every rank): one DDP model with a ``LinkHook`` attached. First
    ``max(ks)`` synchronised micro-steps on loopback, stamped (forward, backward, each bucket's
    ready time and bytes), and the optimizer step timed. Then one emulated link per value of
    ``rounds``: a link (latency ``latency_s``) on which one all-reduce round of every bucket takes
    that many times the measured backward (the slowest rank's median), so the experiment means the
    same on a fast or a slow machine; for each and each K, ``repeats`` updates of every loop, the
    loops alternating, timed on the wall clock with every micro-step's stamps (an odd number of
    repeats gives ``validation`` a true median). Two warm-up
    backwards first, so DDP has rebuilt its buckets before anything counts."""
    if not loops or not all(callable(f) for f in loops.values()):
        raise TypeError(f"loops must map names to update functions (ddp, optimizer, micro_batches), got {loops!r}")
    if not all(r > 0 for r in rounds):
        raise ValueError(f"rounds={list(rounds)!r}: each is a link's round time in backwards, > 0")
    info = dist_info()
    ddp = wrap(model(setup), bucket_cap_mb)
    hook = LinkHook(None).attach(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    kmax = max(ks)
    x, y = dataset(kmax * info.world_size * setup.micro_batch, setup)
    mbs = micro_batches(x, y, k=kmax, rank=info.rank, world_size=info.world_size)
    mbs = [(a.to(info.device), b.to(info.device)) for a, b in mbs]
    for xb, yb in mbs[:2]:  # warm-up: the first backward runs before the bucket rebuild
        F.mse_loss(ddp(xb), yb).backward()
    hook.reset()
    for xb, yb in mbs:
        F.mse_loss(ddp(xb), yb).backward()
    loopback = _copy(hook.steps)
    step_s = []
    for _ in range(max(3, repeats)):
        with Timer() as t:
            opt.step()
        step_s.append(t.seconds)
    emulated = []
    for link in _links(loopback, rounds, latency_s, info.world_size):
        hook.link = link
        next(iter(loops.values()))(ddp, opt, mbs[:1])  # warm-up: the link thread's first collectives
        for k in ks:
            runs = {name: Run(link, k, name, [], []) for name in loops}
            for _ in range(repeats):  # the loops alternate, so a slow spell of the machine hits both alike
                for name, update in loops.items():
                    hook.reset()
                    with Timer() as t:
                        update(ddp, opt, mbs[:k])
                    runs[name].wall_s.append(t.seconds)
                    runs[name].micro.append(_copy(hook.steps))
            emulated.extend(runs.values())
    hook.close()
    del ddp, opt
    return Sweep(list(loops), list(ks), loopback, min(step_s), emulated, info.world_size, info.backend)


def _links(loopback: Sequence[MicroStamps], rounds: Sequence[float], alpha: float, p: int) -> list[Link]:
    """Links whose all-reduce round of every bucket costs ``r`` x the slowest rank's backward."""
    bwd = torch.tensor([statistics.median(s.backward_s for s in loopback)], dtype=torch.float64)
    torch.distributed.all_reduce(bwd, op=torch.distributed.ReduceOp.MAX)
    sizes = [n for _, n in loopback[0].buckets]
    out = []
    for r in rounds:
        wire = r * bwd.item() - len(sizes) * 2 * (p - 1) * alpha  # seconds left for the bytes
        if wire <= 0:
            raise ValueError(f"rounds={r}: the latencies alone exceed {r} backward(s); lower latency_s")
        out.append(Link(f"emulated, round = {r:g} x backward", alpha, 2 * (p - 1) / p * sum(sizes) / wire))
    return out


def _micro(stamp: MicroStamps) -> MicroStep:
    bwd = stamp.backward_s
    return MicroStep(stamp.forward_s, bwd, [Bucket(min(r, bwd), n) for r, n in stamp.buckets])


def micro_step(measured: Sweep) -> MicroStep:
    """One typical synchronised micro-step from the loopback stamps: the median forward and
    backward, each bucket ready at its median fraction of the backward."""
    steps = measured.loopback
    bwd = statistics.median(s.backward_s for s in steps)
    buckets = []
    for j, (_, nbytes) in enumerate(steps[0].buckets):
        share = statistics.median(min(1.0, s.buckets[j][0] / s.backward_s) for s in steps)
        buckets.append(Bucket(share * bwd, nbytes))
    return MicroStep(statistics.median(s.forward_s for s in steps), bwd, buckets)


def update_seconds(measured: Sweep, link: Link, world_size: int | None = None) -> dict[str, list[float]]:
    """Seconds per update for each K on a *modelled* ``link`` (overlap model, ``world_size``
    ranks, the measured ``micro_step``): ``{"k", "compute", "naive", "no_sync"}``."""
    w = world_size or measured.world_size
    micro, opt = micro_step(measured), measured.optimizer_step_s
    out: dict[str, list[float]] = {"k": [], "compute": [], "naive": [], "no_sync": []}
    for k in measured.ks:
        out["k"].append(k)
        out["compute"].append(k * (micro.forward_s + micro.backward_s) + opt)
        out["naive"].append(naive_update_seconds(micro, k, link, w, optimizer_s=opt))
        out["no_sync"].append(no_sync_update_seconds(micro, k, link, w, optimizer_s=opt))
    return out


def _comm_after_backward(m: MicroStep) -> MicroStep:
    return MicroStep(m.forward_s, m.backward_s, [Bucket(m.backward_s, b.nbytes, b.op) for b in m.buckets])


def validation(per_rank: Sequence[Sweep]) -> list[Row]:
    """For each emulated run of ``measure`` (all ranks' results, rank order): the wall clock of
    rank 0 against the overlap model fed with every rank's stamps of that same update
    (``netmodel.lockstep_update_seconds``), and against the old sum (every bucket sent after the whole
    backward). Every repeat is predicted; the row is the repeat with the median ``error`` =
    measured / model - 1, so one update that another program delayed (or one the clock favoured)
    does not decide the point. ``typical_s`` is the model for the typical micro-step
    (``micro_step``, the loopback medians) on that link: it does not inherit one update's compute
    noise, so between the loops it differs by exactly (K - 1) exposed parts."""
    w, opt = len(per_rank), per_rank[0].optimizer_step_s
    typical, per_loop = micro_step(per_rank[0]), {"naive": naive_update_seconds, "no_sync": no_sync_update_seconds}
    rows = []
    for i, run in enumerate(per_rank[0].emulated):
        link = run.link
        reps = []
        for rep, wall in enumerate(run.wall_s):
            ranks = [[_micro(s) for s in r.emulated[i].micro[rep]] for r in per_rank]
            pred = lockstep_update_seconds(ranks, link, w, optimizer_s=opt)[0]
            after = [[_comm_after_backward(m) for m in steps] for steps in ranks]
            reps.append((wall / pred, wall, pred, lockstep_update_seconds(after, link, w, optimizer_s=opt)[0], rep))
        _, wall, pred, old, rep = sorted(reps)[len(reps) // 2]
        model = per_loop.get(run.loop)
        typical_s = model(typical, run.k, link, w, optimizer_s=opt) if model else float("nan")
        rows.append(Row(link.name, run.k, run.loop, wall, pred, old, wall / pred - 1, wall / old - 1, len(reps),
                        typical_s, len(run.micro[rep][-1].buckets)))  # fmt: skip
    return rows


def savings(measured: Sweep) -> list[Saving]:
    """The ``no_sync`` saving on each emulated link and K, measured robustly: the repeats of the
    two loops alternated, so each repeat gives one paired difference (naive - no_sync); the row
    holds their median, min and max (rank 0's wall clock), and the model's saving for the typical
    micro-step on that link (``(K - 1)`` exposed parts)."""
    opt, micro, w = measured.optimizer_step_s, micro_step(measured), measured.world_size
    runs = {(r.link.name, r.k, r.loop): r for r in measured.emulated}
    rows = []
    for (name, k, loop), run in runs.items():
        if loop != "naive" or (name, k, "no_sync") not in runs:
            continue
        pairs = [a - b for a, b in zip(run.wall_s, runs[(name, k, "no_sync")].wall_s)]
        link = run.link
        model = naive_update_seconds(micro, k, link, w, optimizer_s=opt) - no_sync_update_seconds(
            micro, k, link, w, optimizer_s=opt
        )
        rows.append(Saving(name, k, len(pairs), statistics.median(pairs), min(pairs), max(pairs), model))
    return rows
