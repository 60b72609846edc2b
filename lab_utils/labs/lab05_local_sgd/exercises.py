"""Graders of lab 5's exercises, each against a reference computed here.

exercises.check_local_sgd(local_sgd_flat)     # lsgd-from-scratch: local SGD from scratch, on 2 real ranks
exercises.check_update_loop(update_loop)      # lsgd-update-loop: LocalSGD counting optimizer updates, 2 ranks
exercises.check_outer_step(outer_step)        # lsgd-outer-step: DiLoCo's outer Nesterov step, on tensors

Each grades what the code does, not its shape: when the parameters are averaged relative to the
optimizer updates, the collectives, the final parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from accelerate.local_sgd import LocalSGD
from torch import nn

from lab_utils.accelerate_meter import fresh_accelerate
from lab_utils.checks import fingerprint, grader, param_max_diff
from lab_utils.comm import CommCounter
from lab_utils.env import dist_info
from lab_utils.flat import flat, mean_over_ranks
from lab_utils.labs.lab05_local_sgd import task
from lab_utils.labs.lab05_local_sgd.accelerate_runs import AccelerateRun, run_accelerate
from lab_utils.launcher import launch
from lab_utils.memory import nbytes

__all__ = ["check_outer_step", "check_local_sgd", "check_update_loop"]

OUTER_LR, OUTER_MU = 0.7, 0.9


def _outer_rounds(step: Callable[..., Any], start: list[torch.Tensor], deltas: list[list[torch.Tensor]]) -> list:
    """The anchor after each round of ``step(anchor, averaged, momentum)``, where each round the
    ranks' mean lands ``delta`` below the anchor: the same outer gradients whatever the anchor."""
    anchor, momentum, out = [a.clone() for a in start], [torch.zeros_like(a) for a in start], []
    for delta in deltas:
        step(anchor, [a - d for a, d in zip(anchor, delta)], momentum)
        out.append([a.clone() for a in anchor])
    return out


def _torch_nesterov(lr: float, mu: float) -> Callable[..., None]:
    """The outer step as torch.optim.SGD(nesterov=True) takes it, on tensors it keeps itself."""
    state: dict[str, Any] = {}

    def step(anchor: list[torch.Tensor], averaged: list[torch.Tensor], momentum: list[torch.Tensor]) -> None:
        if not state:
            state["params"] = [nn.Parameter(a.clone()) for a in anchor]
            state["opt"] = torch.optim.SGD(state["params"], lr=lr, momentum=mu, nesterov=True)
        for p, a, avg in zip(state["params"], anchor, averaged):
            p.grad = a - avg
        state["opt"].step()
        for a, p in zip(anchor, state["params"]):
            a.copy_(p.detach())

    return step


def _outer_mistakes(lr: float, mu: float) -> dict[str, Callable[..., None]]:
    """Plausible wrong outer steps, each named by what it gets wrong."""

    def rule(sign: float = 1.0, move: str = "nesterov", keep: bool = True) -> Callable[..., None]:
        def step(anchor, averaged, momentum):
            for a, avg, m in zip(anchor, averaged, momentum):
                g = sign * (a - avg)
                new = mu * m + g
                a.sub_(lr * {"nesterov": g + mu * new, "heavy ball": new, "plain": g}[move])
                if keep:
                    m.copy_(new)

        return step

    return {
        "the outer gradient points the wrong way: it is anchor - averaged, the way back from where the "
        "ranks went": rule(sign=-1.0),
        "your step is lr * g, without momentum; Nesterov's is lr * (g + mu * m), m updated first": rule(move="plain"),
        "your step is heavy-ball momentum, lr * m (the same as lr * (g + mu * m) with the m from before this "
        "round); Nesterov's looks ahead with the updated m: lr * (g + mu * m)": rule(move="heavy ball"),
        "the momentum buffers stay at zero between rounds: update `momentum` in place (m.mul_(mu).add_(g)); "
        "a new tensor bound to a name is lost when the function returns": rule(keep=False),
    }


@grader(
    "lsgd-outer-step",
    "the DiLoCo outer step",
    hint="reread section 4: which way does the outer gradient point, and where does Nesterov's "
    "look-ahead use the updated momentum buffer?",
)
def check_outer_step(outer_step: Callable[..., Any]) -> str:
    """Three rounds against torch.optim.SGD(nesterov=True), in float64; each round the ranks' mean
    lands at a fixed offset from the anchor. A wrong anchor is compared with a few plausible
    mistakes, so that the ✗ names the one made."""
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(5, 3, generator=gen, dtype=torch.float64), torch.randn(3, generator=gen, dtype=torch.float64)]
    deltas = [[0.1 * torch.randn(a.shape, generator=gen, dtype=a.dtype) for a in start] for _ in range(3)]
    mine = _outer_rounds(lambda a, avg, m: outer_step(a, avg, m, lr=OUTER_LR, mu=OUTER_MU), start, deltas)
    want = _outer_rounds(_torch_nesterov(OUTER_LR, OUTER_MU), start, deltas)
    wrong = [r for r, (got, ref) in enumerate(zip(mine, want), start=1) if param_max_diff(got, ref) >= 1e-6]
    if not wrong:
        return f"{len(deltas)} outer rounds equal torch.optim.SGD(lr={OUTER_LR}, momentum={OUTER_MU}, nesterov=True)"
    rnd = wrong[0]
    diff = param_max_diff(mine[rnd - 1], want[rnd - 1])
    assert param_max_diff(mine[0], start) > 0, (
        "your anchor did not move: update `anchor` in place (a.sub_(...) or a.copy_(...)); a new tensor bound "
        "to a name, or returned, is not seen by the caller"
    )
    for mistake, step in _outer_mistakes(OUTER_LR, OUTER_MU).items():
        assert param_max_diff(mine[-1], _outer_rounds(step, start, deltas)[-1]) >= 1e-9, (
            f"after outer round {rnd} your anchor differs from torch.optim.SGD(nesterov=True) by {diff:.2g}: {mistake}"
        )
    raise AssertionError(
        f"after outer round {rnd} your anchor differs from torch.optim.SGD(nesterov=True) by {diff:.2g}"
    )


def _local_sgd_flat(model: nn.Module, opt: torch.optim.Optimizer, batches: Iterator, H: int) -> None:
    """lsgd-from-scratch's reference, written apart from the solution it grades: H local steps, the mean
    over the ranks every H steps and once more at exit if needed."""
    done = 0
    for xb, yb in batches:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done % H == 0:
            mean_over_ranks(model.parameters())
    if done % H:
        mean_over_ranks(model.parameters())


class _Order:
    """The forwards and optimizer updates of one training, each with the number of collectives
    counted by then: so each collective is known to come after how many updates, and whether a
    forward had run since the last one (an averaging between a step's forward and its update)."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, counter: CommCounter) -> None:
        self.marks: list[tuple[str, int]] = []
        model.register_forward_pre_hook(lambda *_: self.marks.append(("forward", len(counter.events))))
        opt.register_step_post_hook(lambda *_: self.marks.append(("update", len(counter.events))))

    def at(self, n: int) -> tuple[int, bool]:
        """(updates done, inside a step) when the ``n``-th collective ran."""
        before = [kind for kind, seen in self.marks if seen <= n]
        last = len(before) - before[::-1].index("update") if "update" in before else 0
        return before.count("update"), "forward" in before[last:]


@dataclass(frozen=True)
class _Trained:
    """One training of lsgd-from-scratch on this rank: its collectives as (updates done, op, bytes), the
    updates after which a collective ran inside a step (after its forward), the final parameters
    (fingerprint, tensors) and their bytes."""

    events: list[tuple[int, str, int]]
    inside_a_step: list[int]
    fingerprint: str
    params: list[torch.Tensor]
    param_bytes: int


def _local_sgd_rank(fn: Callable[..., Any], H: int, steps: int) -> dict[str, _Trained]:
    me = dist_info()
    rank, world = me.rank, me.world_size
    x, y, _, _ = task.make_data(world, per_rank=256)
    out = {}
    for who, train in (("yours", fn), ("reference", _local_sgd_flat)):
        model = task.make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        counter = CommCounter()
        order = _Order(model, opt, counter)
        with counter.track():
            train(model, opt, task.rank_batches(x, y, rank, world, steps=steps), H)  # a generator, as in the lab
        when = [order.at(n) for n in range(len(counter.events))]
        out[who] = _Trained(
            events=[(u, e.op, e.nbytes) for (u, _), e in zip(when, counter.events)],
            inside_a_step=sorted({u for u, inside in when if inside}),
            fingerprint=fingerprint(model),
            params=[p.detach().clone() for p in model.parameters()],
            param_bytes=nbytes(model.parameters()),
        )
    return out


@grader(
    "lsgd-from-scratch",
    "local SGD from scratch",
    hint="reread sections 1 and 3: where may a step communicate, how many collectives make one "
    "averaging, what does all_reduce leave in the buffer, and do the ranks end equal?",
)
def check_local_sgd(local_sgd_fn: Callable[..., Any]) -> str:
    """Graded by what the training does, however the loop draws its batches (a list, a look-ahead):
    the collectives counted against the optimizer updates done when they ran, the ranks' final
    models, and the parameters against a local SGD written here."""
    H, steps = 4, 10
    ranks = launch(_local_sgd_rank, 2, args=(local_sgd_fn, H, steps), timeout=120)
    mine = ranks[0]["yours"]
    want = [H, 2 * H, steps]  # after updates 4 and 8, then at exit (10 is not a multiple of 4)
    at = sorted({u for u, _, _ in mine.events})
    assert at == want, (
        f"collectives when {at} optimizer updates were done; local SGD with H={H} over {steps} updates "
        f"averages after updates {want} (the last: the batches ran out between two averagings), and never else"
    )
    per_round = [sum(u == w for u, _, _ in mine.events) for w in want]
    assert per_round == [1] * len(want), f"{per_round} collectives per averaging: use one all_reduce of a flat buffer"
    sent = sum(n for _, _, n in mine.events)
    assert sent == len(want) * mine.param_bytes, f"{sent} bytes sent; each averaging sends every parameter once"
    assert ranks[0]["yours"].fingerprint == ranks[1]["yours"].fingerprint, "the ranks end with different models"
    diff = param_max_diff(mine.params, ranks[0]["reference"].params)
    assert diff < 1e-6 or not mine.inside_a_step, (
        f"your parameters differ from the reference's by {diff:.2g}: the averagings after updates "
        f"{mine.inside_a_step} ran after the next step's forward, so that step's gradient was taken before "
        "the averaging; average right after opt.step()"
    )
    assert diff < 1e-6, f"your parameters differ from the reference's by {diff:.2g} (divided by the world size?)"
    # a second run whose updates end on a multiple of H: the last averaging is the exit's, once
    steps = 2 * H
    after = [u for u, _, _ in launch(_local_sgd_rank, 2, args=(local_sgd_fn, H, steps), timeout=120)[0]["yours"].events]
    assert after == [H, steps], (
        f"collectives after updates {after} with H={H} over {steps} updates, expected after {[H, steps]}: "
        f"update {steps} already averaged, so average at exit only if updates ran since the last averaging"
    )
    return f"{len(want)} averagings of one all_reduce each, ranks equal, parameters equal to the reference"


def _update_loop_reference(accelerator, model, optimizer, scheduler, dataloader, local_sgd_steps) -> None:
    """lsgd-update-loop's reference, written apart from the solution: LocalSGD stepped after the
    ``accumulate()`` block whenever it ended with an update (the placement of Hugging Face's examples)."""
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=True) as local_sgd:
        for inputs, targets in dataloader:
            with accelerator.accumulate(model):
                accelerator.backward(F.cross_entropy(model(inputs), targets))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                local_sgd.step()


@dataclass
class _KeepingParams:
    """``loop``, after which the unwrapped model's parameters are kept in ``params`` (flat)."""

    loop: Callable[..., Any]
    params: list[torch.Tensor]

    def __call__(self, accelerator: Any, model: nn.Module, *args: Any, **kwargs: Any) -> None:
        self.loop(accelerator, model, *args, **kwargs)
        self.params.append(flat(accelerator.unwrap_model(model)))


def _accelerate_rank(loop: Callable[..., Any], cfgs: list[dict[str, Any]]) -> list[tuple[AccelerateRun, float]]:
    """Each setting run with ``loop`` and with the reference: the run, and how far its final
    parameters are from the reference's."""
    out = []
    for cfg in cfgs:
        params: list[torch.Tensor] = []  # yours, the reference's
        runs = []
        for each in (loop, _update_loop_reference):
            with fresh_accelerate():  # a fresh Accelerator for each run
                runs.append(run_accelerate(_KeepingParams(each, params), **cfg))
        out.append((runs[0], (params[0] - params[1]).abs().max().item()))
    return out


# Two settings: the lab's, and one whose last window is shorter (14 micro-batches, accumulation 3:
# the loader's end makes a 5th update of 2 micro-batches), so a loop that counts updates from the
# micro-batch index instead of accelerator.sync_gradients misses one.
_UPDATE_LOOP_CFGS = [
    dict(accumulation=2, micro_batches=16, local_sgd_steps=3),
    dict(accumulation=3, micro_batches=14, local_sgd_steps=5),
]


@grader(
    "lsgd-update-loop",
    "LocalSGD that counts optimizer updates",
    hint="reread section 2: local_sgd.step() counts its calls; which micro-batches end with an update?",
)
def check_update_loop(loop: Callable[..., Any]) -> str:
    """Graded by effect, wherever the loop calls local_sgd.step(): after which optimizer update each
    averaging ran, that none ran inside an accumulation window, and the final parameters against
    a reference loop's."""
    ranks = launch(_accelerate_rank, 2, args=(loop, _UPDATE_LOOP_CFGS), timeout=240)
    done = []
    for i, cfg in enumerate(_UPDATE_LOOP_CFGS):
        (r, diff), k, acc = ranks[0][i], cfg["local_sgd_steps"], cfg["accumulation"]
        where = f"(accumulation {acc}, {cfg['micro_batches']} micro-batches, local_sgd_steps={k})"
        assert r.num_processes == 2, "the Accelerator saw one process: keep Accelerator setup to run_accelerate"
        assert r.micro_batches == cfg["micro_batches"], (
            f"{r.micro_batches} of {cfg['micro_batches']} micro-batches ran in an accelerator.accumulate(model) "
            f"block {where}: keep the guide's one block per micro-batch"
        )
        expected = -(-cfg["micro_batches"] // acc)  # the last, shorter window ends with an update too
        assert r.updates == expected, (
            f"only {r.updates} of {expected} optimizer updates ran {where}: iterate the prepared dataloader "
            "itself; accumulate() syncs the last, shorter window only when the loader reports its end, and "
            "list(dataloader) loses that"
        )
        assert not any(e.source == "ddp-hook" for e in r.events), (
            "gradients were all-reduced: the whole loop belongs inside the LocalSGD block"
        )
        avgs = r.averagings
        want = [*range(k, r.updates + 1, k), r.updates]  # every k updates, plus once at exit
        assert len(avgs) == len(want), (
            f"{len(avgs)} averagings in {r.updates} updates {where}; one every {k} updates + 1 at exit"
        )
        inside = [a for a in avgs if not a.on_update_boundary]
        early = [a.updates for a in inside if a.before_an_update]
        assert not early, (
            f"averagings after updates {early} {where} ran between a window's backward and its optimizer.step(): "
            "call local_sgd.step() after optimizer.step()"
        )
        inside = [a.updates for a in inside]
        assert not inside, (
            f"averagings inside an accumulation window {where}: after updates {inside}, with forwards of the "
            "next window already run"
        )
        after = [a.updates for a in avgs]
        assert after == want, f"averagings after updates {after}, expected after {want} {where}"
        assert r.param_fingerprint == ranks[1][i][0].param_fingerprint, f"the ranks end apart {where}"
        assert diff < 1e-6, f"your final parameters differ from a correct run's by {diff:.2g} {where}"
        done.append(f"{len(avgs)} in {r.updates} updates")
    return f"averagings {' and '.join(done)}, each right after an update"
