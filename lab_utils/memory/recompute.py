"""What checkpointing runs twice, measured: forward calls per module and FLOPs per phase.

    with CallCounter(model) as calls:
        model(x).sum().backward()
    calls.forward["0.linear"], calls.recomputed["0.linear"]   # 1 and 1 if block 0 is checkpointed
    flops = count_flops(lambda: model(x).sum().backward())     # total FLOPs of the step
    rep = measure_recompute(model, lambda: model(x).sum())     # both, forward vs backward split

A forward call during a backward is a recomputation. ``FlopCounterMode`` counts matmuls and
convolutions only: recomputing pointwise ops adds no counted FLOPs yet costs time, which is why
the labs measure both.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from lab_utils.env import in_backward

__all__ = ["CallCounter", "count_flops", "RecomputeReport", "measure_recompute"]


class CallCounter:
    """Context manager counting each submodule's forward calls, split into ``forward`` (normal)
    and ``recomputed`` (calls made during backward). Keys are ``named_modules`` names."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.forward: Counter[str] = Counter()
        self.recomputed: Counter[str] = Counter()
        self._handles: list = []

    def _hook(self, name: str):
        def pre(mod, args):
            (self.recomputed if in_backward() else self.forward)[name] += 1

        return pre

    def __enter__(self) -> CallCounter:
        for name, mod in self.model.named_modules():
            if name:
                self._handles.append(mod.register_forward_pre_hook(self._hook(name)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def recomputed_modules(self) -> list[str]:
        """Names of the leaf modules that ran again during backward."""
        leaves = {n for n, m in self.model.named_modules() if n and not list(m.children())}
        return [n for n, c in self.recomputed.items() if c and n in leaves]


def count_flops(fn: Callable[[], object]) -> int:
    """Total FLOPs (as FlopCounterMode counts them) of everything ``fn()`` runs."""
    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


@dataclass
class RecomputeReport:
    """FLOPs of one step split by phase, plus the forward calls of each module."""

    forward_flops: int
    backward_flops: int  # includes any recomputed forward work
    calls: CallCounter

    @property
    def total_flops(self) -> int:
        return self.forward_flops + self.backward_flops

    @property
    def n_recomputed_calls(self) -> int:
        return sum(self.calls.recomputed[n] for n in self.calls.recomputed_modules())


def measure_recompute(model: nn.Module, loss_fn: Callable[[], torch.Tensor], *, meter=None) -> RecomputeReport:
    """Run ``loss_fn()`` then ``.backward()`` counting FLOPs of each phase and module calls;
    with ``meter`` (a SavedTensorMeter) the forward also runs inside it, so one run gives all.

    Extra forward FLOPs of a checkpointing strategy = its ``total_flops`` minus the baseline's
    (same model and batch, no checkpointing). Keep the counter around forward *and* backward of
    a selective region: its recompute must replay the same ops, the counter's own included."""
    with CallCounter(model) as calls:
        with FlopCounterMode(display=False) as fc, meter if meter is not None else contextlib.nullcontext():
            loss = loss_fn()
        fwd = int(fc.get_total_flops())
        with FlopCounterMode(display=False) as fc:
            loss.backward()
        bwd = int(fc.get_total_flops())
    return RecomputeReport(fwd, bwd, calls)
