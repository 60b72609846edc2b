"""Lab 3's timing on real ranks: where an update's time goes, and the time per update against K
with the overlap model (``lab_utils.netmodel``) on the stamps.

Stamped ready times (``UpdateStamps``): a comm hook that does DDP's default (divide, async
all-reduce) and stamps each bucket's hand-over, bytes and arrival, plus forward/backward/optimizer
stamps; the terms add up exactly to the wall clock.

    rec = UpdateStamps().attach(ddp, optimizer)      # on every rank, before the first update
    rec.begin(); update(ddp, optimizer, micro_batches); rec.end()
    rec.updates[-1].terms()    # {"forward_s", "backward_s", "wait_s", "comm_wait_s", "optimizer_s", "other_s"}

``wait`` runs from a backward's compute end to the next forward or the optimizer step (exposed
communication plus DDP's copy back); ``comm_wait`` is the part with an all-reduce still on the wire.
The stamps are not free: a Python comm hook sits in every bucket's path, a cost every measured
loop pays and the model leaves out.

The K sweep (``measure``): synchronised micro-steps stamped on the ranks over loopback, and the
model on them for any link.

    res = launch(stamps.measure, 2, kwargs={"ks": (1, 2, 4)})
    stamps.micro_step(res[0])                       # the typical micro-step: forward, backward, buckets
    stamps.update_seconds(res[0], LINKS["10GbE"])   # {"k", "compute", "naive", "no_sync"}: seconds (model)

The model against a real shaped link is ``reallink``'s stored run (measured by the root-only
``tools/validate_link``, outside this package).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils.data import micro_batches
from lab_utils.env import dist_info
from lab_utils.labs.lab03_ddp.workload import DEFAULT, Setup, dataset, model, wrap
from lab_utils.netmodel import Bucket, Link, MicroStep, naive_update_seconds, no_sync_update_seconds

__all__ = ["Micro", "Update", "UpdateStamps", "MicroStamps", "Sweep", "measure", "micro_step", "update_seconds"]

# -- stamped ready times: where one real update's time goes -----------------------------------------


@dataclass
class Micro:
    """One forward + backward (perf_counter seconds): its starts, compute end, and each bucket's
    all-reduce as ``(handed over, ended)``, with its bytes in ``nbytes``."""

    forward0: float
    backward0: float = float("nan")
    compute_end: float = float("nan")
    allreduces: list[list[float]] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)


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
    """DDP comm-hook state and hooks that stamp every update between ``begin`` and ``end``. On CUDA
    every stamp first synchronises the device (else it would stamp kernel launches): GPU stamps are
    upper bounds, and they slow the update they stamp."""

    def __init__(self) -> None:
        self.updates: list[Update] = []
        self._world = 1
        self._open = False
        self._cuda = False

    def attach(self, ddp: DDP, optimizer: torch.optim.Optimizer) -> UpdateStamps:
        """Install the comm hook and the stamps on ``ddp`` and ``optimizer`` (every rank)."""
        if not isinstance(ddp, DDP):
            raise TypeError(f"attach() needs a DistributedDataParallel model, got {type(ddp).__name__}")
        self._cuda = next(ddp.parameters()).device.type == "cuda"
        self._world = dist.get_world_size()
        ddp.register_forward_pre_hook(lambda *_: self._forward_started())
        ddp.register_forward_hook(lambda _m, _i, out: self._watch(out))
        ddp.register_comm_hook(self, _stamped_allreduce)
        optimizer.register_step_pre_hook(lambda *_: self._mark_optimizer())
        optimizer.register_step_post_hook(lambda *_: self._mark_optimizer())
        return self

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def begin(self) -> None:
        self.updates.append(Update(self._now()))
        self._open = True

    def end(self) -> Update:
        update = self.updates[-1]
        update.end = self._now()
        self._open = False
        if len(update.optimizer) != 2 or any(m.compute_end != m.compute_end for m in update.micros):
            raise RuntimeError("UpdateStamps: an update needs one optimizer step and complete backwards")
        return update

    def _forward_started(self) -> None:
        if self._open:
            self.updates[-1].micros.append(Micro(self._now()))

    def _watch(self, out: object) -> None:
        if self._open and isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._backward_started)

    def _backward_started(self, grad: torch.Tensor) -> None:
        self.updates[-1].micros[-1].backward0 = self._now()
        # Queued now, so it runs when autograd has computed every gradient, before DDP's callback.
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self.updates[-1].micros[-1].compute_end = self._now()

    def _mark_optimizer(self) -> None:
        if self._open:
            self.updates[-1].optimizer.append(self._now())

    def _launch(self, bucket) -> torch.futures.Future:
        buf = bucket.buffer().div_(self._world)
        stamp = [self._now(), float("nan")]
        if self._open:
            self.updates[-1].micros[-1].allreduces.append(stamp)
            self.updates[-1].micros[-1].nbytes.append(buf.numel() * buf.element_size())
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            stamp[1] = self._now()
            return f.value()[0]

        return fut.then(done)


def _stamped_allreduce(state: UpdateStamps, bucket):
    """DDP comm hook: the default all-reduce, stamped (no annotations: DDP inspects them)."""
    return state._launch(bucket)


# -- the K sweep, and the overlap model on it -------------------------------------------------------


@dataclass(frozen=True)
class MicroStamps:
    """One synchronised forward + backward on this rank: seconds, and each bucket as
    ``(ready_s, nbytes)`` (ready_s from the backward's start)."""

    forward_s: float
    backward_s: float
    buckets: list[tuple[float, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Sweep:
    """What ``measure`` stamped on one rank: the synchronised micro-steps on loopback and the
    optimizer step (fastest of its repeats)."""

    ks: list[int]
    loopback: list[MicroStamps]
    optimizer_step_s: float
    world_size: int
    backend: str


def measure(
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    repeats: int = 3,
    bucket_cap_mb: float | None = None,
    setup: Setup = DEFAULT,
) -> Sweep:
    """On this rank (call it on every rank): one DDP model stamped by ``UpdateStamps``, two warm-up
    backwards (so DDP has rebuilt its buckets before anything counts), then ``repeats`` updates of
    ``max(ks)`` synchronised micro-steps each on loopback: every forward, backward and bucket's
    ready time and bytes, and the optimizer step (the fastest repeat's)."""
    if repeats < 1 or not ks or min(ks) < 1:
        raise ValueError(f"ks={list(ks)!r}, repeats={repeats}: need K values >= 1 and at least one repeat")
    info = dist_info()
    ddp = wrap(model(setup), bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    rec = UpdateStamps().attach(ddp, opt)
    kmax = max(ks)
    x, y = dataset(kmax * info.world_size * setup.micro_batch, setup)
    mbs = micro_batches(x, y, k=kmax, rank=info.rank, world_size=info.world_size)
    mbs = [(a.to(info.device), b.to(info.device)) for a, b in mbs]
    for xb, yb in mbs[:2]:  # warm-up: the first backward runs before the bucket rebuild
        F.mse_loss(ddp(xb), yb).backward()
    for _ in range(repeats):
        opt.zero_grad()
        rec.begin()
        for xb, yb in mbs:
            F.mse_loss(ddp(xb), yb).backward()
        opt.step()
        rec.end()
    loopback = [
        MicroStamps(m.backward0 - m.forward0, m.compute_end - m.backward0,
                    [(s - m.backward0, n) for (s, _), n in zip(m.allreduces, m.nbytes)])
        for u in rec.updates for m in u.micros
    ]  # fmt: skip
    step_s = min(u.optimizer[1] - u.optimizer[0] for u in rec.updates)
    del ddp, opt
    return Sweep(list(ks), loopback, step_s, info.world_size, info.backend)


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
