"""Run a training method (a lab cell) on this rank, everything measured from outside it.

    def train_local(model, opt, batches, log, H): ...   # calls log(loss) after every step
    runs = record.gather(launch(lambda: {"H=8": record.run(train_local, steps=64, H=8)}, world_size=2))

``run`` counts every collective the method makes (``log.watch(ddp)`` adds DDP's); the recorder's
own collectives (the mean model's eval loss, the drift) are not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lab_utils.checks import fingerprint
from lab_utils.comm import CommCounter, CommEvent
from lab_utils.env import dist_info
from lab_utils.flat import flat, mean_over_ranks
from lab_utils.labs.lab05_local_sgd import task
from lab_utils.memory import nbytes

__all__ = ["Recorder", "Run", "run", "gather"]


@dataclass(frozen=True)
class Run:
    """One method's run, measured from outside it. From ``run``: this rank's. From ``gather``:
    rank 0's, with ``losses`` averaged over the ranks and every rank's fingerprints (per step),
    parameters and optimizer-state fingerprint in the ``rank_*`` fields."""

    method: str
    steps: int
    world_size: int
    losses: list[float]  # per step
    fingerprints: list[str]  # of the parameters, per step
    drift: list[float]  # per step, with spread=True: the largest distance of a rank to the mean
    eval_curve: list[tuple[int, float]]  # (step, held-out loss of the ranks' mean model)
    eval_loss: float  # held-out loss of this rank's final model
    comm: dict[str, Any]  # CommCounter.summary() of the method's collectives
    events: list[CommEvent]  # each counted collective
    synced_steps: list[int]  # steps in which the method made a collective
    step_s: list[float]  # seconds of each step, the recorder's own work excluded
    opt_state: str  # fingerprint of the optimizer state ("" when it holds none)
    params: torch.Tensor  # the final parameters, flat, on the CPU
    param_bytes: int
    n_param_tensors: int
    rank_fingerprints: list[list[str]] = field(default_factory=list)
    rank_params: list[torch.Tensor] = field(default_factory=list)
    rank_opt_state: list[str] = field(default_factory=list)


class Recorder:
    """``log(loss)`` at the end of each step; ``log.watch(ddp)`` to count DDP's all-reduces."""

    def __init__(
        self, model: nn.Module, x_eval: torch.Tensor, y_eval: torch.Tensor, *, eval_every: int, spread: bool = False
    ):
        self.model, self.x_eval, self.y_eval = model, x_eval, y_eval
        self.eval_every, self.spread = eval_every, spread
        self.counter = CommCounter()
        self.losses: list[float] = []
        self.fingerprints: list[str] = []
        self.drift: list[float] = []
        self.eval_curve: list[tuple[int, float]] = []
        self.step_s: list[float] = []
        self._t = time.perf_counter()

    def watch(self, ddp: nn.parallel.DistributedDataParallel) -> nn.parallel.DistributedDataParallel:
        """Count this DDP model's gradient all-reduces too; returns it."""
        self.counter.attach(ddp)
        return ddp

    def __call__(self, loss: torch.Tensor) -> None:
        self.step_s.append(time.perf_counter() - self._t)  # the step itself, bookkeeping excluded
        self.losses.append(loss.item())
        self.fingerprints.append(fingerprint(self.model))
        step = len(self.losses)
        with self.counter.paused():  # the recorder's own traffic is not the method's
            if self.spread:
                self.drift.append(_drift(self.model))
            if step % self.eval_every == 0:
                loss = eval_of_mean(self.model, lambda m: F.cross_entropy(m(self.x_eval), self.y_eval).item())
                self.eval_curve.append((step, loss))
        self.counter.mark_step()
        self._t = time.perf_counter()


def _drift(model: nn.Module) -> float:
    """Largest distance (L2, over the ranks) of a rank's parameters from the ranks' mean."""
    mine = flat(model, device=None)
    mean = mine.clone()
    dist.all_reduce(mean)
    mean /= dist_info().world_size
    d = torch.tensor([(mine - mean).norm().item()])
    dist.all_reduce(d, op=dist.ReduceOp.MAX)
    return d.item()


def eval_of_mean(model: nn.Module, loss_of: Callable[[nn.Module], Any]) -> Any:
    """``loss_of(model)`` without gradients for the mean of the ranks' models (what averaging now
    would give); each rank's model keeps its own parameters."""
    with torch.no_grad():
        saved = [p.detach().clone() for p in model.parameters()]
        if dist.is_initialized():
            mean_over_ranks(model.parameters())
        loss = loss_of(model)
        for p, v in zip(model.parameters(), saved):
            p.copy_(v)
    return loss


def run(
    method: Callable[..., Any],
    *,
    steps: int,
    optimizer: str = "sgd",
    lr: float | None = None,
    skew: float = 0.0,
    seed: int = 0,
    eval_every: int | None = None,
    spread: bool = False,
    **method_kwargs: Any,
) -> Run:
    """On this rank: build the lab task, call ``method(model, opt, batches, log, **method_kwargs)``
    with its collectives counted, and return what was measured (a :class:`Run`)."""
    if not dist.is_initialized():
        raise RuntimeError(
            "run() trains on ranks: call it inside a function you start with lab_utils.launch(fn, world_size=2)"
        )
    if steps < 1:
        raise ValueError(f"steps={steps}: need at least one step")
    me = dist_info()
    rank, world = me.rank, me.world_size
    x, y, x_eval, y_eval = task.make_data(world, seed=seed)
    model = task.make_model(seed=seed)
    opt = task.make_optimizer(optimizer, model.parameters(), lr)
    batches = task.rank_batches(x, y, rank, world, steps=steps, seed=seed, skew=skew)
    log = Recorder(model, x_eval, y_eval, eval_every=eval_every or max(1, steps // 16), spread=spread)
    with log.counter.track():
        method(model, opt, batches, log, **method_kwargs)
    if len(log.losses) != steps:
        raise RuntimeError(f"{method.__name__} called log(loss) {len(log.losses)} times in {steps} steps: once a step")
    with torch.no_grad():
        eval_loss = F.cross_entropy(model(x_eval), y_eval).item()
    state = [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    events = log.counter.events
    return Run(
        method=method.__name__,
        steps=steps,
        world_size=world,
        losses=log.losses,
        fingerprints=log.fingerprints,
        drift=log.drift,
        eval_curve=log.eval_curve,
        eval_loss=eval_loss,
        comm=log.counter.summary(),
        events=events,
        synced_steps=sorted({e.step for e in events}),
        step_s=log.step_s,
        opt_state=fingerprint(state) if state else "",
        params=flat(model),
        param_bytes=nbytes(model.parameters()),
        n_param_tensors=len(list(model.parameters())),
    )


def gather(per_rank: Sequence[dict[str, Run]]) -> dict[str, Run]:
    """In the kernel: the ranks' ``{name: Run}`` dicts -> ``{name: rank 0's Run}`` with ``losses``
    averaged over the ranks and every rank's fingerprints, parameters and optimizer state."""
    out: dict[str, Run] = {}
    for name, first in per_rank[0].items():
        rs = [r[name] for r in per_rank]
        out[name] = replace(
            first,
            losses=torch.tensor([r.losses for r in rs]).mean(0).tolist(),
            rank_fingerprints=[r.fingerprints for r in rs],
            rank_params=[r.params for r in rs],
            rank_opt_state=[r.opt_state for r in rs],
        )
    return out
