"""What Accelerate and the Trainer do inside a loop, each piece measured on its own (one process).

from lab_utils.topics.hf import mechanics
mechanics.backward_scaling(4)["grad_ratio"]     # 0.25: accelerator.backward divides the loss
mechanics.scheduler_lrs(prepared=False)         # a schedule stepped per micro-batch ends early
parts = mechanics.uneven_window(4)              # LM micro-batches of very different lengths
mechanics.token_loss_normalisation()            # num_items_in_batch == one big batch
"""

from __future__ import annotations

import math
from typing import Any

import torch
from accelerate import Accelerator
from transformers import get_linear_schedule_with_warmup

from lab_utils.data import lm_batch
from lab_utils.models import tiny_gpt2
from lab_utils.topics.hf.data import offline
from lab_utils.topics.hf.guards import reset_accelerate_state

__all__ = [
    "backward_scaling",
    "scheduler_lrs",
    "uneven_window",
    "target_tokens",
    "flat_grad",
    "token_loss_normalisation",
]


def backward_scaling(grad_accum: int = 4, seed: int = 0) -> dict[str, float]:
    """The ratio of the gradient ``accelerator.backward`` produces inside ``accumulate`` to plain
    ``loss.backward()``'s on the same model and batch (expect 1 / grad_accum). One process."""
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
    reset_accelerate_state()
    try:
        acc = Accelerator(gradient_accumulation_steps=grad_accum, cpu=True)
        model = torch.nn.Module()
        model.p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([model.p], lr=lr)
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


def uneven_window(micro_batches: int = 4, *, per_micro: int = 2, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """An accumulation window of causal-LM micro-batches whose lengths differ a lot (short, long,
    short, ...), padded to one width (labels -100 on padding) so they can also form one big batch."""
    if micro_batches < 2:
        raise ValueError(f"micro_batches={micro_batches}: a window needs at least 2 micro-batches")
    parts = [
        lm_batch(per_micro, min_len=2 + 12 * (i % 2), max_len=4 + 24 * (i % 2), seed=seed + i)
        for i in range(micro_batches)
    ]
    width = max(p["input_ids"].shape[1] for p in parts)

    def pad(t: torch.Tensor, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    return [
        {
            "input_ids": pad(p["input_ids"], 0),
            "attention_mask": pad(p["attention_mask"], 0),
            "labels": pad(p["labels"], -100),
        }
        for p in parts
    ]


def target_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Tokens a causal LM is scored on in ``batch``: labels after the shift, padding excluded."""
    return int((batch["labels"][:, 1:] != -100).sum())


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter's gradient in one vector (zeros where there is none)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()])


def token_loss_normalisation(*, micro_batches: int = 4, per_micro: int = 2, seed: int = 0) -> dict[str, Any]:
    """A window's loss two ways against one big batch of the same sequences: the mean of the
    micro-batch means (the pre-2024 loop) and the sum of ``model(..., num_items_in_batch=N).loss``
    with N the window's target tokens (the fix). Returns the losses and relative gradient gaps."""
    offline()
    model = tiny_gpt2(seed=seed)
    parts = uneven_window(micro_batches, per_micro=per_micro, seed=seed)
    big = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    n_items = sum(target_tokens(p) for p in parts)

    def grads(losses_fn: Any) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        total = losses_fn()
        total.backward()
        return total.item(), flat_grad(model)

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
        "tokens_per_micro_batch": [target_tokens(p) for p in parts],
    }
