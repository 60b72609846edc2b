"""The Trainer measured from outside: micro-batch losses, its log as plain data.

``TrainerMeter`` records each micro-batch's loss as ``compute_loss`` returns it, before any
division for accumulation; what the Trainer believes about that division is on the Trainer
(``model_accepts_loss_kwargs``, ``loss_is_scaled_for_ga``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import Trainer

__all__ = ["Eval", "Summary", "TrainerMeter", "summary", "window_means", "loss_gap"]


class TrainerMeter:
    """Records the loss of every training micro-batch of every Trainer that trains in the block."""

    def __init__(self) -> None:
        self.micro_losses: list[float] = []
        self._original: Any = None

    def __enter__(self) -> TrainerMeter:
        original, meter = Trainer.compute_loss, self

        def compute_loss(trainer: Trainer, model: torch.nn.Module, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(trainer, model, inputs, *args, **kwargs)
            if model.training:
                loss = out[0] if isinstance(out, tuple) else out
                meter.micro_losses.append(loss.detach().float().item())
            return out

        self._original, Trainer.compute_loss = original, compute_loss
        return self

    def __exit__(self, *exc: Any) -> None:
        Trainer.compute_loss = self._original


@dataclass(frozen=True)
class Eval:
    """One evaluation in a Trainer's log: the epoch it closed, the validation loss, accuracy and F1 (fractions)."""

    epoch: float
    eval_loss: float
    eval_accuracy: float
    eval_f1: float


@dataclass(frozen=True)
class Summary:
    """A trained Trainer's log: per update the logged loss, gradient norm (before clipping, None if not
    logged) and learning rate; the evaluations; train time (s), samples/s and updates; and the
    meter's loss of every micro-batch (None without a meter)."""

    step_losses: list[float]
    grad_norms: list[float | None]
    lrs: list[float]
    evals: list[Eval]
    seconds: float
    samples_per_second: float
    updates: int
    micro_losses: list[float] | None = None


def summary(trainer: Trainer, meter: TrainerMeter | None = None) -> Summary:
    """A trained Trainer's log as plain data (a ``Summary``), with the meter's micro-batch losses if given."""
    logs = trainer.state.log_history
    steps = [h for h in logs if "loss" in h and "eval_loss" not in h]
    final = next(h for h in reversed(logs) if "train_runtime" in h)
    return Summary(
        step_losses=[h["loss"] for h in steps],
        grad_norms=[h.get("grad_norm") for h in steps],
        lrs=[h["learning_rate"] for h in steps],
        evals=[
            Eval(epoch=h["epoch"], eval_loss=h["eval_loss"], eval_accuracy=h["eval_accuracy"], eval_f1=h["eval_f1"])
            for h in logs
            if "eval_loss" in h
        ],
        seconds=final["train_runtime"],
        samples_per_second=final["train_samples_per_second"],
        updates=trainer.state.global_step,
        micro_losses=None if meter is None else list(meter.micro_losses),
    )


def window_means(micro_losses: list[float], grad_accum: int) -> list[float]:
    """Mean loss of each accumulation window: what the Trainer logs per update (logging_steps=1)."""
    return [
        sum(micro_losses[i : i + grad_accum]) / len(micro_losses[i : i + grad_accum])
        for i in range(0, len(micro_losses), grad_accum)
    ]


def loss_gap(a: list[float], b: list[float]) -> float:
    """Largest absolute difference between two loss histories of the same length."""
    if len(a) != len(b):
        raise ValueError(f"the runs have {len(a)} and {len(b)} losses: not the same job")
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)
