"""What ``accelerator.backward`` does to a loss, measured on its own (one process)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from accelerate import Accelerator

from lab_utils.accelerate_meter import fresh_accelerate

__all__ = ["BackwardScaling", "backward_scaling"]


@dataclass(frozen=True)
class BackwardScaling:
    """Gradient of ``accelerator.backward`` over plain ``loss.backward()``'s (ratios), inside and outside
    ``accumulate``, for ``gradient_accumulation_steps=grad_accum``."""

    inside: float
    outside: float
    grad_accum: int


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
