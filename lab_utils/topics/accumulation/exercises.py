"""Lab 2's exercise graders: each runs the student's code and compares it with one large batch.

    from lab_utils.topics.accumulation import exercises
    exercises.check_tf_port(tf_style_accumulate)        # Exercise 1: seed 004's accum_vars, ported
    exercises.check_clipping(accumulate_with_clipping)  # Exercise 2: clip once per window, with a scaler
    exercises.check_token_loss(token_loss)              # Exercise 3: token losses over a window
    exercises.check_norms(exact_norms)                  # Exercise 4: which normalisations accumulate

Every grader builds its own model and data in float64, where "equal" means equal to rounding
(1e-12), and computes its own large-batch reference (``reference.py``); it needs nothing else
from the notebook.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils import data, models
from lab_utils.checks import grader, param_max_diff
from lab_utils.topics.accumulation.losses import count_tokens, lm_token_loss_sum, mse_sum
from lab_utils.topics.accumulation.reference import large_batch_grads, train_large_batch
from lab_utils.topics.accumulation.windows import windows

__all__ = ["check_tf_port", "check_clipping", "check_token_loss", "check_norms", "NORMS", "CountingScaler"]

F64 = torch.float64
TOL = 1e-12
MAX_NORM = 0.05  # small enough that every update of check_clipping's run is clipped
NORMS = ("batchnorm", "layernorm", "groupnorm", "batchnorm-eval")


def _regression(n_micro: int) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    x, y = data.regression(n=n_micro * 8, dim=8, out_dim=2, dtype=F64, seed=1)
    return models.mlp(16, 2, in_dim=8, out_dim=2, dtype=F64, seed=1), list(data.batches(x, y, batch_size=8))


def _mse_mean(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x), y)


def _norm(tensors: Iterable[torch.Tensor]) -> float:
    return torch.cat([t.detach().flatten() for t in tensors]).norm().item()


def _sgd(model: nn.Module, lr: float, momentum: float = 0.0) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


@grader(
    "Exercise 1 · seed 004's accum_vars, ported to PyTorch",
    hint="reread section 1: what does one large batch's gradient average over, and what do your buffers add up?",
)
def check_tf_port(tf_style_accumulate: Callable) -> str:
    """``tf_style_accumulate(model, micro_batches, loss_fn)`` returns one buffer per parameter that
    must hold the large-batch gradient; ``.grad`` must stay untouched (the buffers are the point)."""
    model, micro = _regression(n_micro=3)  # 3: not a power of two, so a wrong divisor shows
    params = list(model.parameters())
    got = list(tf_style_accumulate(model, micro, _mse_mean))
    assert all(p.grad is None for p in params), (
        "your function filled .grad: compute each micro-batch's gradients with torch.autograd.grad "
        "and add them into your own buffers, as accum_vars does"
    )
    assert len(got) == len(params) and all(g.shape == p.shape for g, p in zip(got, params)), (
        f"expected {len(params)} buffers shaped like model.parameters(), got {len(got)}"
    )
    ref = large_batch_grads(model, micro, loss_sum=mse_sum)
    ratio = _norm(got) / _norm(ref)
    assert param_max_diff(got, ref) < TOL, (
        f"the buffers are not the large-batch gradient: their norm is {ratio:.3g} x its norm "
        f"over {len(micro)} micro-batches"
    )
    return f"the buffers hold the gradient of one batch of {len(micro)} micro-batches"


class CountingScaler(torch.amp.GradScaler):
    """A CPU ``GradScaler`` that counts how often each of its methods is called."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.calls = {"scale": 0, "unscale_": 0, "step": 0, "update": 0}

    def scale(self, outputs):  # type: ignore[override]
        self.calls["scale"] += 1
        return super().scale(outputs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls["unscale_"] += 1
        super().unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, *args, **kwargs):
        self.calls["step"] += 1
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None) -> None:
        self.calls["update"] += 1
        super().update(new_scale)


@grader(
    "Exercise 2 · clip once per window, with a gradient scaler",
    hint="reread section 2.6: which gradient does one large batch clip, and what does the scaler hold in .grad?",
)
def check_clipping(accumulate_with_clipping: Callable) -> str:
    """``accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler)`` must train
    like one large batch per window whose gradient is clipped to ``max_norm`` before each step,
    with every loss scaled by ``scaler`` (a CPU ``GradScaler``)."""
    k = 4
    model, micro = _regression(n_micro=2 * k)
    mine, ref = copy.deepcopy(model), copy.deepcopy(model)
    norms = train_large_batch(ref, _sgd(ref, 0.05, 0.9), micro, k, loss_sum=mse_sum, max_norm=MAX_NORM)
    if min(norms) <= MAX_NORM:  # the grader's own premise, not the student's fault
        raise RuntimeError(f"check_clipping: clipping must bind, but a window's norm is {min(norms):.3g}")
    scaler = CountingScaler()
    try:
        accumulate_with_clipping(mine, _sgd(mine, 0.05, 0.9), micro, k, MAX_NORM, scaler)
    except RuntimeError as err:
        raise AssertionError(f"torch stopped your loop: {err}") from None
    n_windows = len(norms)
    assert scaler.calls["scale"] == len(micro), (
        f"scaler.scale was called {scaler.calls['scale']} times for {len(micro)} micro-batches: scale every loss"
    )
    assert scaler.calls["step"] == scaler.calls["update"] == n_windows, (
        f"scaler.step / update were called {scaler.calls['step']} / {scaler.calls['update']} times "
        f"for {n_windows} windows: once per window each"
    )
    assert param_max_diff(mine, model) > 0, "the parameters did not move: step the optimizer once per window"
    gap, moved = param_max_diff(mine, ref), param_max_diff(mine, model) / param_max_diff(ref, model)
    assert gap < TOL, (
        f"after {n_windows} updates your parameters differ from the clipped large batch's by {gap:.1e} "
        f"(they moved {moved:.2g} x as far)"
    )
    return f"{n_windows} clipped updates through the scaler, equal to the clipped large batch"


@grader(
    "Exercise 3 · token losses over a window",
    hint="reread section 2.2: how much does one token weigh in one large batch?",
)
def check_token_loss(token_loss: Callable) -> str:
    """``token_loss(model, mb, window)`` is backpropagated for each micro-batch of each window; the
    run must equal one large batch per window on sequences of different lengths."""
    k = 4
    micro = [data.lm_batch(n=3, vocab_size=64, min_len=3, max_len=16, seed=s) for s in range(2 * k)]
    if len({count_tokens(mb) for mb in micro[:k]}) < 2:  # the grader's own premise
        raise RuntimeError("check_token_loss: the micro-batches must hold different numbers of tokens")
    model = models.tiny_gpt2(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32).to(F64)
    mine, ref = copy.deepcopy(model), copy.deepcopy(model)
    opt = _sgd(mine, 0.5)
    for window in windows(micro, k):
        for mb in window:
            token_loss(mine, mb, window).backward()
        opt.step()
        opt.zero_grad()
    train_large_batch(ref, _sgd(ref, 0.5), micro, k, loss_sum=lm_token_loss_sum, items=count_tokens)
    assert param_max_diff(mine, model) > 1e-6, "the parameters did not move: return a loss that depends on the model"
    gap = param_max_diff(mine, ref)
    assert gap < TOL, f"after {len(micro) // k} updates your model differs from the large batch's by {gap:.1e}"
    return "every token weighs the same as in one large batch"


def _norm_mlp(kind: str) -> nn.Module:
    torch.manual_seed(0)
    norm = {"batchnorm": lambda: nn.BatchNorm1d(16), "layernorm": lambda: nn.LayerNorm(16)}.get(
        kind, lambda: nn.GroupNorm(4, 16)
    )()
    return nn.Sequential(nn.Linear(8, 16), norm, nn.ReLU(), nn.Linear(16, 2)).to(F64)


def _accumulates_exactly(name: str) -> bool:
    k = 4
    model = _norm_mlp(name.removesuffix("-eval"))
    model.train(not name.endswith("-eval"))
    _, micro = _regression(n_micro=2 * k)
    mine, ref = copy.deepcopy(model), copy.deepcopy(model)
    opt = _sgd(mine, 0.1)
    for window in windows(micro, k):
        for mb in window:
            (_mse_mean(mine, mb) / k).backward()
        opt.step()
        opt.zero_grad()
    train_large_batch(ref, _sgd(ref, 0.1), micro, k, loss_sum=mse_sum)
    return param_max_diff(mine, ref) < TOL


@grader(
    "Exercise 4 · which normalisations accumulate exactly",
    hint="reread section 2.3: does one sample's output depend on the other samples of its batch?",
)
def check_norms(exact_norms: Iterable[str]) -> str:
    """``exact_norms``: the names in ``NORMS`` whose models, trained with accumulation, equal one large batch."""
    chosen = set(exact_norms)
    unknown = chosen - set(NORMS)
    assert not unknown, f"unknown names {sorted(unknown)}: choose among {list(NORMS)}"
    safe = {name for name in NORMS if _accumulates_exactly(name)}
    assert chosen == safe, f"{len(chosen & safe)} right, {len(chosen ^ safe)} wrong (each model trained twice)"
    return f"all {len(NORMS)} models trained both ways"
