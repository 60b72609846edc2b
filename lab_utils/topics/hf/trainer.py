"""The Trainer measured from outside: micro-batch losses, its log as plain data.

``TrainerMeter`` records each micro-batch's loss as ``compute_loss`` returns it, before any
division for accumulation; what the Trainer believes about that division is on the Trainer
(``model_accepts_loss_kwargs``, ``loss_is_scaled_for_ga``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Trainer

__all__ = ["TrainerMeter", "summary", "window_means", "loss_gap"]


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


def summary(trainer: Trainer, meter: TrainerMeter | None = None) -> dict[str, Any]:
    """A trained Trainer's log as plain data: ``step_losses``, ``grad_norms`` (before clipping), ``lrs``,
    ``evals``, ``seconds``, ``samples_per_second``, ``updates`` (+ the meter's ``micro_losses``)."""
    logs = trainer.state.log_history
    steps = [h for h in logs if "loss" in h and "eval_loss" not in h]
    final = next(h for h in reversed(logs) if "train_runtime" in h)
    out: dict[str, Any] = {
        "step_losses": [h["loss"] for h in steps],
        "grad_norms": [h.get("grad_norm") for h in steps],
        "lrs": [h["learning_rate"] for h in steps],
        "evals": [
            {k: h[k] for k in ("epoch", "eval_loss", "eval_accuracy", "eval_f1")} for h in logs if "eval_loss" in h
        ],
        "seconds": final["train_runtime"],
        "samples_per_second": final["train_samples_per_second"],
        "updates": trainer.state.global_step,
    }
    if meter is not None:
        out["micro_losses"] = list(meter.micro_losses)
    return out


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
