"""Lab 3's timing on real ranks: where an update's time goes, a slow link emulated, and the time
per update against K with the overlap model (``lab_utils.netmodel``) on it.

Stamped ready times (``UpdateStamps``): a comm hook that does DDP's default (divide, async
all-reduce) and stamps each bucket's hand-over and arrival, plus forward/backward/optimizer stamps;
the terms add up exactly to the wall clock.

    rec = UpdateStamps().attach(ddp, optimizer)      # on every rank, before the first update
    rec.begin(); update(ddp, optimizer, micro_batches); rec.end()
    rec.updates[-1].terms()    # {"forward_s", "backward_s", "wait_s", "comm_wait_s", "optimizer_s", "other_s"}

``wait`` runs from a backward's compute end to the next forward or the optimizer step (exposed
communication plus DDP's copy back); ``comm_wait`` is the part with an all-reduce still on the wire.
The stamps are not free: a Python comm hook sits in every bucket's path. On loopback (2 gloo
ranks, lab 3's model, micro-batches of 1024, K = 4: 20 all-reduces) a stamped update took 93-96
ms against 91 ms with DDP's built-in all-reduce, 3-5 % or about 0.2 ms per bucket.

The emulated link (``LinkHook``): DDP's buckets wait on a slow "wire" without blocking the backward.

    hook = LinkHook(LINKS["1GbE"]).attach(ddp)     # call on every rank, before the first backward
    loss.backward()                                 # returns once the emulated link has delivered
    hook.steps[-1]                                  # stamps of that backward (seconds from its start)
    hook.close()

The comm hook stamps each bucket's ready time and queues it for this rank's link thread, which
starts the real all-reduce and completes the bucket's future at start + the link's cost
(``netmodel.collective_seconds``), so the wall clock includes the link exactly as
``lab_utils.netmodel`` models it. ``link=None`` forwards each bucket at once: ready times, no delay.
The emulator queues transfers by the model's own rule, so what it shows is a demo, not a
validation: the model against a real shaped link is ``reallink``'s stored run (measured by the
root-only ``tools/validate_link``, outside this package).

Traps it avoids: ranks agree on a transfer's start through a board in shared memory, not a
collective (on two busy cores a tiny all-reduce took up to 10 ms, slower than the link it
emulates), so the ranks must share one machine; on CUDA every stamp first synchronises (else it
stamps kernel launches), which makes GPU stamps an upper bound.

The K sweep (``measure``): compute and bucket-ready times stamped on the ranks, then the same
loops on emulated links.

    loops = {"naive": naive_update, "no_sync": no_sync_update}      # the notebook's loops (training functions)
    res = launch(timing.measure, 2, args=(loops,), kwargs={"ks": (1, 2, 4), "rounds": (1, 3)})
    timing.update_seconds(res[0], LINKS["10GbE"])   # {"k", "compute", "naive", "no_sync"}: seconds (model)
    timing.validation(res)                    # emulated wall clock against the model, per link/loop/K
    timing.savings(res[0])                    # naive - no_sync per paired repeat: median, min, max
"""

from __future__ import annotations

import os
import queue
import statistics
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils.data import micro_batches
from lab_utils.env import dist_info
from lab_utils.labs.lab03_ddp.workload import DEFAULT, Setup, UpdateFn, dataset, model, wrap
from lab_utils.netmodel import (
    Bucket,
    Link,
    MicroStep,
    collective_seconds,
    lockstep_update_seconds,
    naive_update_seconds,
    no_sync_update_seconds,
)
from lab_utils.timing import Timer

__all__ = ["Micro", "Update", "UpdateStamps", "MicroStamps", "LinkHook", "Run", "Sweep", "Row", "Saving", "measure",
           "micro_step", "update_seconds", "validation", "savings"]  # fmt: skip

# -- stamped ready times: where one real update's time goes -----------------------------------------


@dataclass
class Micro:
    """One forward + backward (perf_counter seconds): its starts, compute end, and each bucket's
    all-reduce as ``(handed over, ended)``."""

    forward0: float
    backward0: float = float("nan")
    compute_end: float = float("nan")
    allreduces: list[list[float]] = field(default_factory=list)


@dataclass
class Update:
    """One update's stamps: from ``begin`` to ``end``, its micro-steps and optimizer step."""

    begin: float
    end: float = float("nan")
    micros: list[Micro] = field(default_factory=list)
    optimizer: list[float] = field(default_factory=list)

    def terms(self) -> dict[str, float]:
        """Seconds of the update, split so that the terms add up to ``wall_s`` exactly."""
        fwd = bwd = wait = comm_wait = 0.0
        for i, m in enumerate(self.micros):
            nxt = self.micros[i + 1].forward0 if i + 1 < len(self.micros) else self.optimizer[0]
            fwd += m.backward0 - m.forward0
            bwd += m.compute_end - m.backward0
            wait += nxt - m.compute_end
            if m.allreduces:  # the part of the wait with an all-reduce still on the wire
                comm_wait += min(nxt, max(m.compute_end, max(e for _, e in m.allreduces))) - m.compute_end
        opt = self.optimizer[1] - self.optimizer[0]
        wall = self.end - self.begin
        return {"wall_s": wall, "forward_s": fwd, "backward_s": bwd, "wait_s": wait, "comm_wait_s": comm_wait,
                "optimizer_s": opt, "other_s": wall - fwd - bwd - wait - opt}  # fmt: skip


class UpdateStamps:
    """DDP comm-hook state and hooks that stamp every update between ``begin`` and ``end``."""

    def __init__(self) -> None:
        self.updates: list[Update] = []
        self._world = 1
        self._open = False

    def attach(self, ddp: DDP, optimizer: torch.optim.Optimizer) -> UpdateStamps:
        """Install the comm hook and the stamps on ``ddp`` and ``optimizer`` (every rank)."""
        if not isinstance(ddp, DDP):
            raise TypeError(f"attach() needs a DistributedDataParallel model, got {type(ddp).__name__}")
        if next(ddp.parameters()).device.type != "cpu":
            raise ValueError("UpdateStamps reads the host clock: CPU ranks only (a GPU runs ahead of the host)")
        self._world = dist.get_world_size()
        ddp.register_forward_pre_hook(lambda *_: self._forward_started())
        ddp.register_forward_hook(lambda _m, _i, out: self._watch(out))
        ddp.register_comm_hook(self, _stamped_allreduce)
        optimizer.register_step_pre_hook(lambda *_: self._mark_optimizer())
        optimizer.register_step_post_hook(lambda *_: self._mark_optimizer())
        return self

    def begin(self) -> None:
        self.updates.append(Update(time.perf_counter()))
        self._open = True

    def end(self) -> Update:
        update = self.updates[-1]
        update.end = time.perf_counter()
        self._open = False
        if len(update.optimizer) != 2 or any(m.compute_end != m.compute_end for m in update.micros):
            raise RuntimeError("UpdateStamps: an update needs one optimizer step and complete backwards")
        return update

    def _forward_started(self) -> None:
        if self._open:
            self.updates[-1].micros.append(Micro(time.perf_counter()))

    def _watch(self, out: object) -> None:
        if self._open and isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._backward_started)

    def _backward_started(self, grad: torch.Tensor) -> None:
        self.updates[-1].micros[-1].backward0 = time.perf_counter()
        # Queued now, so it runs when autograd has computed every gradient, before DDP's callback.
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self.updates[-1].micros[-1].compute_end = time.perf_counter()

    def _mark_optimizer(self) -> None:
        if self._open:
            self.updates[-1].optimizer.append(time.perf_counter())

    def _launch(self, bucket) -> torch.futures.Future:
        buf = bucket.buffer().div_(self._world)
        stamp = [time.perf_counter(), float("nan")]
        if self._open:
            self.updates[-1].micros[-1].allreduces.append(stamp)
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            stamp[1] = time.perf_counter()
            return f.value()[0]

        return fut.then(done)


def _stamped_allreduce(state: UpdateStamps, bucket):
    """DDP comm hook: the default all-reduce, stamped (no annotations: DDP inspects them)."""
    return state._launch(bucket)


# -- the emulated link ------------------------------------------------------------------------------


@dataclass
class MicroStamps:
    """One forward + backward on this rank: seconds, buckets as ``(ready_s, nbytes)`` pairs
    (ready_s from the backward's start) and when each transfer left and arrived on the link."""

    forward_s: float = float("nan")
    backward_s: float = float("nan")
    buckets: list[tuple[float, int]] = field(default_factory=list)
    transfers: list[tuple[float, float]] = field(default_factory=list)


class LinkHook:
    """DDP comm-hook state: each bucket queued on an emulated ``link`` (None: no delay)."""

    def __init__(self, link: Link | None = None):
        if link is not None and not isinstance(link, Link):
            raise TypeError(f"link must be a lab_utils.netmodel.Link or None, got {type(link).__name__}")
        self.link = link
        self.steps: list[MicroStamps] = []
        self._world = 1
        self._cuda = False
        self._fwd0 = self._bwd0 = 0.0
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._board: _Board | None = None
        self._seq = 0

    def attach(self, ddp: DDP) -> LinkHook:
        """Install the comm hook, the stamps and the link thread on ``ddp`` (every rank)."""
        if not isinstance(ddp, DDP):
            raise TypeError(f"attach() needs a DistributedDataParallel model, got {type(ddp).__name__}")
        self._world = dist_info().world_size
        device = next(ddp.parameters()).device
        self._cuda = device.type == "cuda"
        self._board = _Board(device)
        ddp.register_forward_pre_hook(lambda *_: self._forward_started())
        ddp.register_forward_hook(lambda _m, _i, out: self._watch(out))
        ddp.register_comm_hook(self, _link_hook)
        self._thread = threading.Thread(target=self._serve, name="emulated-link", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the link thread (call after the last backward)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def reset(self) -> None:
        self.steps.clear()

    # -- stamps ----------------------------------------------------------------------------
    def _now(self) -> float:
        """The clock once the device has finished the work queued so far (CUDA runs asynchronously)."""
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _forward_started(self) -> None:
        self._fwd0 = self._now()
        self.steps.append(MicroStamps())

    def _watch(self, out: Any) -> None:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._backward_started)

    def _backward_started(self, grad: torch.Tensor) -> None:
        self._bwd0 = self._now()
        step = self.steps[-1]
        step.forward_s = self._bwd0 - self._fwd0
        # Runs when autograd has computed every gradient, before DDP waits for its buckets.
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self.steps[-1].backward_s = self._now() - self._bwd0

    # -- the link --------------------------------------------------------------------------
    def _enqueue(self, bucket: Any) -> torch.futures.Future:
        now = self._now()
        buf = bucket.buffer()
        nbytes = buf.numel() * buf.element_size()
        step = self.steps[-1]
        step.buckets.append((now - self._bwd0, nbytes))
        self._seq += 1
        self._board.post(self._seq, now)  # on the backward's own thread: the others see it at once
        fut: torch.futures.Future = torch.futures.Future()
        self._queue.put((self._seq, buf, nbytes, fut, step, self._bwd0))
        return fut

    def _serve(self) -> None:
        free = 0.0  # when the link is next free (perf_counter seconds, as planned)
        while (item := self._queue.get()) is not None:
            seq, buf, nbytes, fut, step, bwd0 = item
            try:
                if self.link is None:
                    start = time.perf_counter()
                    dist.all_reduce(buf)  # loopback: the real collective at once
                else:
                    start = max(self._board.latest(seq), free)  # every rank has it, the link is free
                    work = dist.all_reduce(buf, async_op=True)  # the real collective (gloo or NCCL)
                    free = start + collective_seconds("all_reduce", nbytes, self._world, self.link)
                    time.sleep(max(0.0, free - time.perf_counter()))
                    work.wait()  # the link's time is up; the data is normally there already
                buf.div_(self._world)
                step.transfers.append((start - bwd0, time.perf_counter() - bwd0))
                fut.set_result(buf)
            except Exception as e:  # surface it in the backward that waits for this bucket
                fut.set_exception(e)


class _Board:
    """Each rank's latest bucket-ready times in a file mapped into every rank's memory: slot
    ``seq % SLOTS`` of rank r holds ``(seq, ready time)``. A rank runs at most one backward's
    buckets ahead of the others' link threads (its futures wait for their all-reduces), so
    a slot is read before it is written again."""

    SLOTS = 4096

    def __init__(self, device: torch.device) -> None:
        me = dist_info()
        self.rank, world = me.rank, me.world_size
        path = [None]
        if self.rank == 0:
            fd, path[0] = tempfile.mkstemp(prefix="emulated-link-")
            os.ftruncate(fd, world * self.SLOTS * 2 * 8)
            os.close(fd)
        dist.broadcast_object_list(path, src=0)
        ok = torch.tensor([float(os.path.exists(path[0]))], device=device)  # NCCL reduces on the GPU
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if ok.item() != 1.0:
            raise RuntimeError(
                "LinkHook emulates a link between ranks of ONE machine (they share its clock and "
                f"memory), but a rank could not open {path[0]}: run it with launch() or one torchrun node"
            )
        shared = torch.from_file(path[0], shared=True, size=world * self.SLOTS * 2, dtype=torch.float64)
        self._cells = shared.view(world, self.SLOTS, 2).numpy()
        dist.barrier()  # every rank has mapped it: the name can go, the memory stays until exit
        if self.rank == 0:
            os.unlink(path[0])

    def post(self, seq: int, ready: float) -> None:
        cell = self._cells[self.rank, seq % self.SLOTS]
        cell[1] = ready
        cell[0] = seq  # the tag last: a reader that sees the tag sees the time

    def latest(self, seq: int, poll_s: float = 50e-6) -> float:
        """The latest ready time of bucket ``seq`` over all ranks, once every rank has posted it."""
        slot = self._cells[:, seq % self.SLOTS]
        while (slot[:, 0] != seq).any():
            if (slot[:, 0] > seq).any():
                raise RuntimeError(f"emulated link: a rank overwrote bucket {seq}'s slot before it was read")
            time.sleep(poll_s)
        return float(slot[:, 1].max())


def _link_hook(state: LinkHook, bucket):
    """DDP comm hook: queue the bucket on the emulated link and return its (pending) future.

    (No annotations: DDP checks them and this module's postponed ones would read as strings.)"""
    return state._enqueue(bucket)


# -- the K sweep, and the overlap model on it -------------------------------------------------------


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
