"""The Trainer side of lab 4: its loss-scaling belief, and a meter attached from outside.

    from lab_utils.topics.hf import trainer
    trainer.model_scales_loss_itself(model)    # True for GPT-2's classifier: the Trainer won't divide
    with trainer.TrainerMeter() as meter:      # around any Trainer(...).train()
        t = train_with_trainer(...)
    run = trainer.summary(t, meter)            # micro_losses, step_losses, lrs, evals, seconds, saved_bytes

``TrainerMeter`` wraps ``Trainer.compute_loss`` while the block runs: each training micro-batch's
loss (the batch mean, before any division) and, for the first ``batches`` of them, the bytes
autograd saves for backward (``lab_utils.memory.SavedTensorMeter``); on a GPU, the allocator peak.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
from transformers import Trainer

from lab_utils.memory import CudaPeak, SavedTensorMeter

__all__ = ["model_scales_loss_itself", "TrainerMeter", "summary"]


def model_scales_loss_itself(model: torch.nn.Module) -> bool:
    """What the Trainer believes: True when ``forward`` takes ``**kwargs`` (or the model says
    ``accepts_loss_kwargs``), so it passes ``num_items_in_batch`` and does NOT divide the loss by
    the accumulation steps. Right for causal LMs; wrong for heads whose loss is a plain mean,
    such as GPT-2's sequence classifier: the gradient then comes out ``grad_accum`` times too big."""
    if hasattr(model, "accepts_loss_kwargs"):
        return bool(model.accepts_loss_kwargs)
    params = inspect.signature(model.forward).parameters.values()
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)


class TrainerMeter:
    """Records every Trainer's training micro-batch losses and saved-for-backward bytes in a block."""

    def __init__(self, batches: int = 4) -> None:
        if batches < 0:
            raise ValueError(f"batches={batches}: how many micro-batches to meter, 0 or more")
        self.batches = batches
        self.micro_losses: list[float] = []
        self.saved: list[int] = []
        self._peak = CudaPeak()
        self._original: Any = None

    @property
    def saved_bytes(self) -> int | None:
        """The most bytes one metered micro-batch kept for backward (None if none was metered)."""
        return max(self.saved) if self.saved else None

    @property
    def cuda_peak_bytes(self) -> int | None:
        return self._peak.bytes

    def __enter__(self) -> TrainerMeter:
        original, meter = Trainer.compute_loss, self

        def compute_loss(trainer: Trainer, model: torch.nn.Module, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            on = model.training and len(meter.saved) < meter.batches
            with SavedTensorMeter(model) if on else contextlib.nullcontext() as saved:
                out = original(trainer, model, inputs, *args, **kwargs)
            if model.training:
                loss = out[0] if isinstance(out, tuple) else out
                meter.micro_losses.append(loss.detach().float().item())
                if saved is not None:
                    meter.saved.append(saved.total_bytes)
            return out

        self._original, Trainer.compute_loss = original, compute_loss
        self._peak.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        Trainer.compute_loss = self._original
        self._peak.__exit__(*exc)


def summary(trainer: Trainer, meter: TrainerMeter | None = None) -> dict[str, Any]:
    """A trained Trainer's log as plain data: ``step_losses``, ``grad_norms``, ``lrs`` (per
    update), ``evals`` (per evaluation), ``seconds`` and ``samples_per_second`` (its own
    train_runtime), ``updates``; plus the meter's ``micro_losses``, ``saved_bytes``, ``cuda_peak_bytes``."""
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
        out.update(
            micro_losses=list(meter.micro_losses),
            saved_bytes=meter.saved_bytes,
            cuda_peak_bytes=meter.cuda_peak_bytes,
        )
    return out
