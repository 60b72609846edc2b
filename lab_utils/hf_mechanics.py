"""What Accelerate does inside a loop, each piece measured on its own (one process, seconds).

    from lab_utils import hf_mechanics as mech
    mech.backward_scaling(4)["grad_ratio"]          # 0.25: accelerator.backward divides the loss
    mech.scheduler_lrs(prepared=False)               # a schedule stepped per micro-batch ends early
    mech.token_loss_normalisation()                  # num_items_in_batch == one big batch

Also the checks of lab 4's exercises that are about these mechanics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from lab_utils.hf import offline
from lab_utils.hf_launch import reset_accelerate_state

__all__ = [
    "backward_scaling",
    "scheduler_lrs",
    "token_loss_normalisation",
    "check_sync_answer",
    "check_token_scaling_answer",
]


def _ok(msg: str) -> None:
    print(f"✓ {msg}")


def backward_scaling(grad_accum: int = 4, seed: int = 0) -> dict[str, float]:
    """What ``accelerator.backward`` does to the loss inside ``accumulate``: the ratio of the
    gradient it produces to plain ``loss.backward()``'s (expect 1 / grad_accum). One process."""
    from accelerate import Accelerator

    reset_accelerate_state()
    try:
        torch.manual_seed(seed)
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        ref = torch.nn.Linear(4, 1)
        torch.nn.functional.mse_loss(ref(x), y).backward()
        acc = Accelerator(gradient_accumulation_steps=grad_accum, cpu=True)
        model = acc.prepare(torch.nn.Linear(4, 1))
        model.load_state_dict(ref.state_dict())
        with acc.accumulate(model):
            acc.backward(torch.nn.functional.mse_loss(model(x), y))
        ratio = (model.weight.grad.norm() / ref.weight.grad.norm()).item()
        return {"grad_ratio": ratio, "grad_accum": float(grad_accum)}
    finally:
        reset_accelerate_state()


def scheduler_lrs(
    *,
    micro_batches: int = 16,
    grad_accum: int = 4,
    prepared: bool = True,
    total_steps: int | None = None,
    lr: float = 1.0,
) -> list[float]:
    """Learning rate after each micro-batch of a linear-decay schedule stepped every micro-batch,
    through Accelerate's wrapper (``prepared``) or directly. ``total_steps`` defaults to the number
    of optimizer updates (micro_batches / grad_accum). One process, no model: a bare parameter."""
    from accelerate import Accelerator
    from transformers import get_linear_schedule_with_warmup

    reset_accelerate_state()
    try:
        acc = Accelerator(gradient_accumulation_steps=grad_accum, cpu=True)
        p = torch.nn.Parameter(torch.zeros(1))
        model = torch.nn.Module()
        model.p = p
        opt = torch.optim.SGD([p], lr=lr)
        total = total_steps if total_steps is not None else math.ceil(micro_batches / grad_accum)
        sched = get_linear_schedule_with_warmup(opt, 0, total)
        if prepared:
            model, opt, sched = acc.prepare(model, opt, sched)
        lrs = []
        for _ in range(micro_batches):
            with acc.accumulate(model):
                acc.backward(model.p.sum() * 0)
                opt.step()
                sched.step()
                opt.zero_grad()
            lrs.append(float(sched.get_last_lr()[0]))
        return lrs
    finally:
        reset_accelerate_state()


def token_loss_normalisation(*, micro_batches: int = 4, per_micro: int = 2, seed: int = 0) -> dict[str, float]:
    """Causal-LM loss over an accumulation window of variable-length sequences, three ways,
    compared with one big batch: the mean of the micro-batch means (the pre-2024 loop), and the
    sum of ``model(..., num_items_in_batch=N).loss`` where N counts the window's target tokens
    (the fix). Returns the losses and the gradient gaps to the big batch."""
    offline()
    from lab_utils.models import tiny_gpt2

    return _token_loss_normalisation(tiny_gpt2(seed=seed), micro_batches, per_micro, seed)


def _token_loss_normalisation(model, micro_batches: int, per_micro: int, seed: int) -> dict[str, Any]:
    from lab_utils.data import lm_batch

    # Very different lengths per micro-batch make the effect plain.
    parts = [
        lm_batch(per_micro, min_len=2 + 12 * (i % 2), max_len=4 + 24 * (i % 2), seed=seed + i)
        for i in range(micro_batches)
    ]
    width = max(p["input_ids"].shape[1] for p in parts)

    def pad(t, value):
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    parts = [
        {
            "input_ids": pad(p["input_ids"], 0),
            "attention_mask": pad(p["attention_mask"], 0),
            "labels": pad(p["labels"], -100),
        }
        for p in parts
    ]
    big = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    n_items = int(sum((p["labels"][:, 1:] != -100).sum() for p in parts))  # shifted targets

    def grads(losses_fn):
        model.zero_grad()
        total = losses_fn()
        total.backward()
        return total.item(), torch.cat([p.grad.flatten() for p in model.parameters()])

    big_loss, g_big = grads(lambda: model(**big).loss)
    mom_loss, g_mom = grads(lambda: sum(model(**p).loss for p in parts) / micro_batches)
    fix_loss, g_fix = grads(lambda: sum(model(**p, num_items_in_batch=n_items).loss for p in parts))
    model.zero_grad()
    scale = g_big.abs().max().item()
    return {
        "big_batch": big_loss,
        "mean_of_means": mom_loss,
        "num_items_in_batch": fix_loss,
        "grad_gap_mean_of_means": (g_mom - g_big).abs().max().item() / scale,
        "grad_gap_num_items": (g_fix - g_big).abs().max().item() / scale,
        "tokens_per_micro_batch": [int((p["labels"][:, 1:] != -100).sum()) for p in parts],
    }


# ----------------------------------------------------------------------------- exercise checks
def check_sync_answer(answer: Mapping[str, Any] | None, rank_run: Mapping[str, Any]) -> None:
    """Exercise: predict a rank's sync flags and all-reduce count, compared with the measured run."""
    if answer is None:
        raise AssertionError("answer is None: give {'sync': [...], 'collectives': int}")
    sync = [bool(s) for s in answer.get("sync", [])]
    if sync != list(rank_run["sync"]):
        raise AssertionError(
            "the sync flags differ from the measured run; hint: a window ends every "
            "grad_accum micro-batches, and at the end of the epoch"
        )
    if int(answer.get("collectives", -1)) != sum(rank_run["collectives"]):
        raise AssertionError(
            "wrong number of collectives; hint: this small model fits in ONE DDP "
            "bucket, so each sync step makes one all-reduce"
        )
    _ok("sync flags and number of all-reduces: as measured on rank 0")


def check_token_scaling_answer(scaled_loss: Any) -> None:
    """Exercise: ``scaled_loss(token_loss_sum, window_tokens, grad_accum)`` makes accumulation
    with ``accelerator.backward`` (which divides by grad_accum) equal one big batch."""
    if scaled_loss is None:
        raise AssertionError("answer is None: write scaled_loss(token_loss_sum, window_tokens, grad_accum)")
    g = torch.Generator().manual_seed(1)
    for k in (2, 4):
        tokens = torch.randint(1, 40, (k,), generator=g)
        sums = torch.rand(k, generator=g, dtype=torch.float64) * tokens
        big = (sums.sum() / tokens.sum()).item()  # one batch: mean over all tokens
        got = sum(float(scaled_loss(s, int(tokens.sum()), k)) / k for s in sums)  # backward divides by k
        if abs(got - big) > 1e-9 * max(1.0, abs(big)):
            raise AssertionError(
                f"with grad_accum={k} your losses add up to {got:.6f} after the "
                f"division by k, one big batch gives {big:.6f}; hint: divide by the "
                f"window's tokens and undo the division that backward will do"
            )
    _ok("token-normalised losses: the window equals one big batch")
