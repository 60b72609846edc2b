"""A convergence study that earns its conclusions: several paired seeds per configuration, each
comparison a sign test over the seeds, corrected for how many comparisons are made.

``run_seeds`` trains S seeds *as one* (``SeedStack``: parameters stacked, one batched matmul per
layer), which holds because every method's operation is elementwise per parameter or per seed;
``tests/labs/lab05_local_sgd/test_study.py`` checks it against separate runs (SGD, AdamW, one process).
Seeds are paired (same init, data and order per seed): ``sign_test`` counts the seeds A wins, so
two runs whose spreads over the seeds overlap can still rank on every seed; ``holm`` corrects.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils.comm import CommCounter, CommEvent
from lab_utils.env import dist_info
from lab_utils.labs.lab05_local_sgd import task
from lab_utils.labs.lab05_local_sgd.record import Recorder, eval_of_mean

__all__ = ["SeedStack", "Seeds", "run_seeds", "spread", "SignTest", "sign_test", "holm"]


class SeedStack(nn.Module):
    """S models of one shape (Linear layers, elementwise activations) as one module: ``[S, B, in]``
    -> logits ``[S, classes, B]`` for ``F.cross_entropy`` with targets ``[S, B]``. That loss is 1/S
    of the sum of the seeds' mean losses, so the output passes S times the gradient back: each
    seed gets the gradient of its own mean loss, as when trained alone."""

    def __init__(self, models: Sequence[nn.Module]):
        super().__init__()
        if not models:
            raise ValueError("SeedStack needs at least one model")
        plans = [[m for m in model.modules() if not list(m.children())] for model in models]
        self.acts: list[nn.Module | None] = []
        weights, biases = [], []
        for i, layer in enumerate(plans[0]):
            if isinstance(layer, nn.Linear):
                weights.append(nn.Parameter(torch.stack([p[i].weight.detach().T for p in plans])))
                biases.append(nn.Parameter(torch.stack([p[i].bias.detach()[None] for p in plans])))
                self.acts.append(None)
            elif isinstance(layer, (nn.GELU, nn.ReLU, nn.Tanh)):
                self.acts.append(layer)
            else:
                raise TypeError(f"SeedStack: {type(layer).__name__} is not a Linear or an elementwise activation")
        self.weights, self.biases = nn.ParameterList(weights), nn.ParameterList(biases)
        self.seeds = len(models)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        li = 0
        for act in self.acts:
            if act is None:
                x = torch.baddbmm(self.biases[li], x, self.weights[li])
                li += 1
            else:
                x = act(x)
        out = x.transpose(1, 2)
        if out.requires_grad:  # S times the gradient back (see the class docstring)
            out.register_hook(lambda g: g * self.seeds)
        return out


@dataclass(frozen=True)
class Seeds:
    """One method trained over several seeds as one (``run_seeds``): each seed's held-out loss of
    the ranks' mean model, at the end and at each evaluation step, and the counted communication."""

    method: str
    seeds: list[int]
    steps: int
    final: list[float]  # held-out loss per seed, after the last step
    curve: list[tuple[int, list[float]]]  # (step, held-out loss per seed)
    rounds: int  # steps in which the method made a collective
    comm: dict[str, Any]  # CommCounter.summary() without per_step: collectives, bytes (per rank), by_op
    events: list[CommEvent]  # each counted collective


class _Log:
    """``log(loss)`` per step for run_seeds: counts steps and, at evaluation steps, each seed's
    held-out loss of the ranks' mean model (traffic not counted)."""

    def __init__(self, model: SeedStack, x_eval: torch.Tensor, y_eval: torch.Tensor, at: set[int]):
        self.model, self.x_eval, self.y_eval, self.at = model, x_eval, y_eval, at
        self.counter = CommCounter()
        self.curve: list[tuple[int, list[float]]] = []
        self.steps = 0

    watch = Recorder.watch

    def __call__(self, loss: torch.Tensor) -> None:
        self.steps += 1
        if self.steps in self.at:
            with self.counter.paused():
                losses = eval_of_mean(
                    self.model, lambda m: F.cross_entropy(m(self.x_eval), self.y_eval, reduction="none")
                )
                self.curve.append((self.steps, [round(v, 6) for v in losses.mean(1).tolist()]))
        self.counter.mark_step()


def run_seeds(
    method: Callable[..., Any],
    *,
    steps: int,
    seeds: Sequence[int] = (0, 1, 2),
    optimizer: str = "sgd",
    lr: float | None = None,
    skew: float = 0.0,
    evals: int = 8,
    fresh: bool = False,
    **method_kwargs: Any,
) -> Seeds:
    """On this rank: ``method(model, opt, batches, log, **method_kwargs)`` with the seeds' models
    stacked. Returns a :class:`Seeds`: ``final`` and ``curve`` (held-out losses per seed, of the
    ranks' mean model), ``rounds`` (steps that communicated), ``comm`` and ``events``.
    ``fresh``: a training set large enough that no sample is seen twice (no epoch repeats, so
    nothing is memorised); otherwise ``task.TASK["per_rank"]`` samples per rank."""
    if steps < 1 or not seeds or evals < 1:
        raise ValueError(f"steps={steps}, seeds={list(seeds)}, evals={evals}: need steps >= 1, a seed, evals >= 1")
    me = dist_info()
    rank, world = me.rank, me.world_size
    # fresh: per rank 1.5x the samples the steps read (a shard by class varies in size around per_rank)
    per_rank = math.ceil(1.5 * steps * task.TASK["batch"]) if fresh else None
    data = [task.make_data(world, per_rank=per_rank, seed=s) for s in seeds]
    x_eval = torch.stack([d[2] for d in data])
    y_eval = torch.stack([d[3] for d in data])
    model = SeedStack([task.make_model(seed=s) for s in seeds])
    opt = task.make_optimizer(optimizer, model.parameters(), lr)
    streams = [
        task.rank_batches(d[0], d[1], rank, world, steps=steps, seed=s, skew=skew, once=fresh)
        for d, s in zip(data, seeds)
    ]
    batches = ((torch.stack([b[0] for b in bs]), torch.stack([b[1] for b in bs])) for bs in zip(*streams))
    at = {math.ceil(steps * (i + 1) / evals) for i in range(evals)}
    log = _Log(model, x_eval, y_eval, at)
    with log.counter.track():
        method(model, opt, batches, log, **method_kwargs)
    if log.steps != steps:
        raise RuntimeError(f"{method.__name__} called log(loss) {log.steps} times in {steps} steps: once a step")
    events = log.counter.events
    return Seeds(
        method=method.__name__,
        seeds=list(seeds),
        steps=steps,
        final=log.curve[-1][1],
        curve=log.curve,
        rounds=len({e.step for e in events}),
        comm={k: v for k, v in log.counter.summary().items() if k != "per_step"},
        events=events,
    )


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(worst, mean, best) of a lower-is-better metric over seeds."""
    vals = list(values)
    if not vals:
        raise ValueError("spread() of no values: pass one number per seed")
    return max(vals), sum(vals) / len(vals), min(vals)


@dataclass(frozen=True)
class SignTest:
    """A won ``wins`` of ``n`` seeds (ties dropped); ``p``: the two-sided sign test's p-value (each
    seed a fair coin if neither were better)."""

    wins: int
    n: int
    p: float

    def __str__(self) -> str:
        return f"{self.wins} of {self.n} seeds (sign test p = {self.p:.2g})"


def sign_test(a: Sequence[float], b: Sequence[float]) -> SignTest:
    """A vs B on the same seeds, in the same order (lower is better): how many seeds A wins, and
    the two-sided sign test's p. With 8 seeds, 8 of 8 gives p = 0.0078 and 7 of 8 p = 0.07; with
    5 seeds even 5 of 5 gives only p = 0.0625."""
    if not a or len(a) != len(b):
        raise ValueError(f"sign_test() needs one value per seed on each side, in seed order: got {len(a)} and {len(b)}")
    wins = sum(x < y for x, y in zip(a, b))
    n = wins + sum(x > y for x, y in zip(a, b))
    if n == 0:
        return SignTest(0, 0, 1.0)
    extreme = max(wins, n - wins)
    tail = sum(math.comb(n, i) for i in range(extreme, n + 1)) / 2**n
    return SignTest(wins, n, min(1.0, 2 * tail))


def holm(ps: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down correction for ``len(ps)`` comparisons: which of them stay significant at
    family-wise level ``alpha``. The smallest p is held to alpha/m, the next to alpha/(m-1), ...;
    the first that fails stops the rest (Holm, *A simple sequentially rejective multiple test
    procedure*, 1979)."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    keep = [False] * len(ps)
    for rank, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - rank):
            break
        keep[i] = True
    return keep
