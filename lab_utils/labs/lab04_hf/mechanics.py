"""What Accelerate and the Trainer do inside a loop, each piece measured on its own (one process)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator

from lab_utils.accelerate_meter import fresh_accelerate
from lab_utils.data import count_tokens, lm_batch
from lab_utils.flat import flat
from lab_utils.labs.lab04_hf.data import offline
from lab_utils.models import tiny_gpt2

__all__ = [
    "BackwardScaling",
    "TokenNormalisation",
    "backward_scaling",
    "uneven_window",
    "token_loss_normalisation",
]


@dataclass(frozen=True)
class BackwardScaling:
    """Gradient of ``accelerator.backward`` over plain ``loss.backward()``'s (ratios), inside and outside
    ``accumulate``, for ``gradient_accumulation_steps=grad_accum``."""

    inside: float
    outside: float
    grad_accum: int


@dataclass(frozen=True)
class TokenNormalisation:
    """One window's loss three ways (one big batch, mean of micro-batch means, ``num_items_in_batch``),
    each way's largest gradient gap to the big batch's (relative to its largest entry) and the target
    tokens of each micro-batch."""

    big_batch: float
    mean_of_means: float
    num_items_in_batch: float
    grad_gap_mean_of_means: float
    grad_gap_num_items: float
    tokens_per_micro_batch: list[int]


def backward_scaling(grad_accum: int = 4) -> BackwardScaling:
    """The ratio of the gradient ``accelerator.backward`` produces to plain ``loss.backward()``'s on
    the same model and batch, for a call inside ``accumulate`` (``inside``) and one outside it
    (``outside``): a ``BackwardScaling``. Accelerate 1.15 divides by grad_accum on every call:
    expect 1 / grad_accum twice."""
    with fresh_accelerate():
        torch.manual_seed(0)
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        ref = torch.nn.Linear(4, 1)
        torch.nn.functional.mse_loss(ref(x), y).backward()
        acc = Accelerator(gradient_accumulation_steps=grad_accum, cpu=True)
        model = acc.prepare(torch.nn.Linear(4, 1))
        model.load_state_dict(ref.state_dict())
        ratios = {}
        for where in ("inside", "outside"):
            model.zero_grad()
            with acc.accumulate(model) if where == "inside" else contextlib.nullcontext():
                acc.backward(torch.nn.functional.mse_loss(model(x), y))
            ratios[where] = (model.weight.grad.norm() / ref.weight.grad.norm()).item()
        return BackwardScaling(inside=ratios["inside"], outside=ratios["outside"], grad_accum=grad_accum)


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

    def pad(key: str, t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-100 if key == "labels" else 0)

    return [{key: pad(key, t) for key, t in p.items()} for p in parts]


def token_loss_normalisation(*, micro_batches: int = 4) -> TokenNormalisation:
    """A window's loss two ways against one big batch of the same sequences: the mean of the
    micro-batch means (the pre-2024 loop) and the sum of ``model(..., num_items_in_batch=N).loss``
    with N the window's target tokens (the fix). Returns the losses and relative gradient gaps (a
    ``TokenNormalisation``)."""
    offline()
    model = tiny_gpt2(seed=0)
    parts = uneven_window(micro_batches)
    big = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    n_items = sum(count_tokens(p) for p in parts)

    def grads(losses_fn: Any) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        total = losses_fn()
        total.backward()
        return total.item(), flat(model, grads=True)

    big_loss, g_big = grads(lambda: model(**big).loss)
    mom_loss, g_mom = grads(lambda: sum(model(**p).loss for p in parts) / micro_batches)
    fix_loss, g_fix = grads(lambda: sum(model(**p, num_items_in_batch=n_items).loss for p in parts))
    model.zero_grad()
    scale = g_big.abs().max().item()
    return TokenNormalisation(
        big_batch=big_loss,
        mean_of_means=mom_loss,
        num_items_in_batch=fix_loss,
        grad_gap_mean_of_means=(g_mom - g_big).abs().max().item() / scale,
        grad_gap_num_items=(g_fix - g_big).abs().max().item() / scale,
        tokens_per_micro_batch=[count_tokens(p) for p in parts],
    )
