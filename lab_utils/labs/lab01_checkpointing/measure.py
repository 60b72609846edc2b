"""Measuring checkpointing on a real chain: per-block profile, strategies side by side, and what
stays alive after a forward.

    act, inp, cost = measure.profile_blocks(model, x)          # the planner's inputs, measured
    rows = measure.compare_strategies(model, x, {"none": forward_plain, "every block": forward_every_block})
    print(measure.results_table(rows))

``compare_strategies`` measures the lab's forward functions from outside, never choosing what to
checkpoint; ``kept`` counts the chain's forward only (not the loss's), batch excluded.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
from torch import nn

from lab_utils.env import in_backward
from lab_utils.labs.lab01_checkpointing.planner import evaluate
from lab_utils.memory import SavedTensorMeter, fmt_bytes, measure_step, storage_key
from lab_utils.memory.recompute import count_flops, measure_recompute
from lab_utils.timing import progress as progress_bar
from lab_utils.timing import time_fn

__all__ = [
    "StrategyRow",
    "profile_blocks",
    "compare_strategies",
    "interleaved_min",
    "results_table",
    "AliveActivations",
]

Forward = Callable[[nn.Sequential, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class StrategyRow:
    """One strategy's training step (``compare_strategies``): bytes kept for backward (batch
    excluded), the ``(start, stop)`` segments re-run in backward, the planner's peak for them and the
    allocator's (bytes, None when not measured), forward/total/extra FLOPs, module calls re-run,
    seconds (fastest repeat, nan when untimed) and the largest gradient difference to the plain step."""

    name: str
    segments: list[tuple[int, int]]
    kept: int
    peak_model: int
    peak: int | None
    forward_flops: int
    total_flops: int
    extra_flops: int
    recomputed: int
    grad_diff: float
    seconds: float = float("nan")


def profile_blocks(model: nn.Sequential, x: torch.Tensor) -> tuple[list[int], list[int], list[int]]:
    """The planner's ``act``, ``inp`` and ``cost``, measured block by block: bytes saved for backward
    (input included when saved, parameters not), bytes of the input, forward FLOPs."""
    act, inp, cost = [], [], []
    h = x.detach()
    for blk in model:
        h = h.detach().requires_grad_(h.is_floating_point())  # as in the middle of a chain
        with SavedTensorMeter(blk) as meter:
            out = blk(h)
        act.append(meter.total_bytes)
        inp.append(h.untyped_storage().nbytes())
        cost.append(count_flops(lambda blk=blk, h=h: blk(h)))
        h = out
    return act, inp, cost


def _rebuilt_segments(model: nn.Sequential, run: Callable[[], object]) -> list[tuple[int, int]]:
    """The runs of consecutive blocks that start again during backward while ``run`` trains a step:
    backward rebuilds one checkpointed segment at a time, its blocks in order."""
    order: list[int] = []
    hooks = [
        blk.register_forward_pre_hook(lambda m, a, i=i: order.append(i) if in_backward() else None)
        for i, blk in enumerate(model)
    ]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    segs: list[list[int]] = []
    for i in order:
        if segs and i == segs[-1][1]:
            segs[-1][1] = i + 1
        else:
            segs.append([i, i + 1])
    return sorted((s, e) for s, e in segs)


def _as_schedule(rebuilt: list[tuple[int, int]], n: int) -> list[tuple[int, int, str]]:
    """The rebuilt segments as "full", every other block as "store": a schedule for the planner."""
    full = dict(rebuilt)
    out, i = [], 0
    while i < n:
        if i in full:
            out.append((i, full[i], "full"))
            i = full[i]
        else:
            out.append((i, i + 1, "store"))
            i += 1
    return out


def compare_strategies(
    model: nn.Sequential,
    x: torch.Tensor,
    strategies: dict[str, Forward],
    *,
    loss_fn: Callable[[torch.Tensor], torch.Tensor] = lambda y: y.pow(2).mean(),
    repeat: int = 3,
    warmup: int = 2,
    profile_cpu: bool = False,
    blocks: tuple[list[int], list[int], list[int]] | None = None,
    progress: bool = False,
) -> list[StrategyRow]:
    """One training step per strategy (name -> ``fn(model, x) -> y``), measured from outside. Each
    ``StrategyRow``: kept (batch excluded), segments (blocks re-run in backward, ``(start, stop)``), peak_model
    (``planner.evaluate`` for those segments, shifted by the measured kept), peak (allocator peak:
    CUDA, or the CPU profiler with ``profile_cpu``, else None), forward/total/extra_flops,
    recomputed (calls re-run), seconds (``interleaved_min``; nan when ``repeat=0``), grad_diff."""
    act, inp, _ = blocks or profile_blocks(model, x)
    params = [p for p in model.parameters() if p.requires_grad]

    def grads_of(fn) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss_fn(fn()).backward()
        return [p.grad.detach().clone() for p in params]

    def plain() -> torch.Tensor:
        return model(x)

    ref = grads_of(plain)
    base_total = measure_recompute(model, lambda: loss_fn(plain())).total_flops
    rows, steps = [], []
    for name, forward in progress_bar(
        strategies.items(), desc="strategies", total=len(strategies), disable=not progress
    ):
        if not callable(forward):
            raise TypeError(f"strategy {name!r}: give a forward function fn(model, x) -> y, got {forward!r}")
        fn = lambda forward=forward: forward(model, x)  # noqa: E731
        got: list[torch.Tensor] = []
        segs = _rebuilt_segments(model, lambda fn=fn, got=got: got.extend(grads_of(fn)))
        diff = max(float((g - r).abs().max()) for g, r in zip(got, ref))
        # gradients stay allocated (zeroed, not freed), as from the second step of a training
        # loop on: the peak then measures activations and temporaries, not the gradients
        model.zero_grad(set_to_none=False)
        meter = SavedTensorMeter(model, exclude=[x])

        def metered(fn=fn, meter=meter) -> torch.Tensor:
            with meter:  # the chain's forward only: what the loss saves is not the chain's
                y = fn()
            return loss_fn(y)

        rec = measure_recompute(model, metered)
        if profile_cpu or x.is_cuda:  # a second step, for the allocator's peak
            rep = measure_step(model, fn, exclude=[x], profile_cpu=profile_cpu, loss_of=loss_fn)
            kept, peak = rep.saved_bytes, rep.peak_cuda_bytes if x.is_cuda else rep.peak_cpu_bytes
        else:  # no allocator peak to measure: the counted step gives the bytes kept
            kept, peak = meter.total_bytes, None

        def step(fn=fn):
            model.zero_grad(set_to_none=False)
            loss_fn(fn()).backward()

        steps.append(step)
        # the planner's position-aware model of this run's peak (its segments as measured; the
        # batch, which the model counts and the meter does not, taken out; a selective cache,
        # which the model does not know, added back through the measured kept bytes)
        model_plan = evaluate(_as_schedule(segs, len(act)), act, inp, [0] * len(act))
        peak_model = model_plan.peak + kept - model_plan.kept
        rows.append(
            StrategyRow(
                name=name,
                segments=segs,
                kept=kept,
                peak_model=peak_model,
                peak=peak,
                forward_flops=rec.forward_flops,
                total_flops=rec.total_flops,
                extra_flops=rec.total_flops - base_total,
                recomputed=rec.n_recomputed_calls,
                grad_diff=diff,
            )
        )
    times = interleaved_min(steps, warmup=warmup, repeat=repeat)
    model.zero_grad(set_to_none=True)
    return [replace(row, seconds=secs) for row, secs in zip(rows, times)]


def interleaved_min(steps: list[Callable[[], object]], *, warmup: int = 1, repeat: int = 3) -> list[float]:
    """Fastest of ``repeat`` timed calls of each step, in rounds (every step once per round), so a
    burst of load slows every step alike; the garbage collector paused, as ``timeit`` does."""
    for _ in range(warmup):
        for step in steps:
            step()
    best = [float("nan") if repeat <= 0 else float("inf")] * len(steps)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: a collection of the whole kernel's objects is not the step's time
    try:
        for _ in range(max(repeat, 0)):
            for i, step in enumerate(steps):
                best[i] = min(best[i], time_fn(step, warmup=0, repeat=1).min)
    finally:
        if was_enabled:
            gc.enable()
    return best


class AliveActivations:
    """Weak references to every leaf module's forward output: ``bytes()`` is what is still alive
    after the forward, however it is kept (no saved-tensor hook, so students' own hooks are seen)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self._refs: list[weakref.ref] = []
        self._handles: list = []

    def _record(self, module, args, out) -> None:
        if in_backward():
            return
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self._refs.append(weakref.ref(t))

    def __enter__(self) -> AliveActivations:
        self._refs.clear()
        for mod in self.model.modules():
            if not list(mod.children()):
                self._handles.append(mod.register_forward_hook(self._record))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def bytes(self, exclude: Iterable[torch.Tensor] = ()) -> int:
        """Bytes of module outputs still alive now, storages counted once, ``exclude``d ones not."""
        gc.collect()
        skip = {storage_key(t) for t in exclude}
        alive: dict = {}
        for ref in self._refs:
            t = ref()
            if t is not None and storage_key(t) not in skip:
                alive[storage_key(t)] = t.untyped_storage().nbytes()
        return sum(alive.values())


def results_table(rows: list[StrategyRow], *, timed: bool = False) -> str:
    """A fixed-width text table of ``compare_strategies`` rows, relative to the first. Time only with
    ``timed``: on a CPU, steps of tiny blocks time mostly overhead, not the recompute."""
    b = rows[0]
    lines = [
        f"{'strategy':<24}{'kept':>11}{'kept/base':>10}{'peak(model)':>13}{'alloc peak':>12}"
        f"{'extra fwd FLOPs':>16}{'re-run calls':>13}" + (f"{'time':>10}{'time/base':>10}" if timed else "")
    ]
    for r in rows:
        lines.append(
            f"{r.name:<24}{fmt_bytes(r.kept):>11}{r.kept / b.kept:>10.1%}"
            f"{fmt_bytes(r.peak_model):>13}{fmt_bytes(r.peak):>12}"
            f"{r.extra_flops / r.forward_flops:>16.2f}{r.recomputed:>13}"
            + (f"{r.seconds * 1e3:>8.1f}ms{r.seconds / b.seconds:>10.2f}" if timed else "")
        )
    return "\n".join(lines)
