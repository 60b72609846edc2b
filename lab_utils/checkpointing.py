"""Gradient checkpointing on a chain of blocks: plans (which segments to checkpoint) and runners.

    from lab_utils.checkpointing import plan_for_budget, segments_sqrt, run_chain
    plan = plan_for_budget(act_bytes, input_bytes, fwd_flops, budget=2**20)   # least recompute
    plan.segments            # [(start, stop, "full" | "store"), ...]
    y = run_chain(model, x, plan.segments)                 # model: an nn.Sequential of blocks
    y = run_chain(model, x, segments_sqrt(len(model)))     # Chen et al. 2016: sqrt(N) segments

Cost model (the planner's, stated so a student can check it by hand). The chain has N blocks;
block i keeps ``act[i]`` bytes for backward when run normally (its input included when it saves
it), its input has ``inp[i]`` bytes and its forward costs ``cost[i]`` (FLOPs or seconds).
A plan cuts the chain into segments [start, stop). A stored segment keeps the sum of its blocks'
``act``; a checkpointed ("full") segment keeps only its input ``inp[start]`` and, during backward,
is run forward again once (recompute = sum of its ``cost``), its activations existing only while
its own backward runs; backward handles one segment at a time. Hence

    kept      = sum(act over stored blocks) + sum(inp[start] over checkpointed segments)
    peak      = kept + max(sum(act over a checkpointed segment))       (0 if none)
    recompute = sum(cost over checkpointed blocks)

``peak`` is an upper bound (by then the later segments' memory has been freed); ``kept`` is what
``lab_utils.memory.SavedTensorMeter`` measures after the forward. With N uniform blocks and k
equal checkpointed segments, peak = k*inp + (N/k)*act, smallest near k = sqrt(N*act/inp): the
sqrt(N) rule of Chen et al. (2016), for one extra forward pass.

Runners always use ``use_reentrant=False`` (reentrant checkpointing ignores inputs that do not
require grad and breaks with DDP: "Expected to mark a variable ready only once").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    checkpoint_sequential,
    create_selective_checkpoint_contexts,
)

from lab_utils.memory import note_saved

__all__ = [
    "Segment",
    "Plan",
    "evaluate",
    "plan_for_budget",
    "min_peak",
    "optimal_front",
    "segments_none",
    "segments_every_block",
    "segments_every_k",
    "segments_sqrt",
    "segments_checkpoint_sequential",
    "segments_selective",
    "STRATEGIES",
    "strategy_segments",
    "MATMUL_OPS",
    "selective_policy",
    "module_policy",
    "run_chain",
    "checkpoint_region",
    "profile_blocks",
    "compare_strategies",
    "results_table",
]

Segment = tuple[int, int, str]  # (start, stop, mode); mode: "store", "full" or "selective"
MODES = ("store", "full", "selective")


@dataclass(frozen=True)
class Plan:
    """A schedule and its cost under the model in the module docstring."""

    segments: tuple[Segment, ...]
    kept: float
    peak: float
    recompute: float

    @property
    def checkpointed_blocks(self) -> list[int]:
        return [i for s, e, m in self.segments if m != "store" for i in range(s, e)]

    @property
    def n_checkpointed_segments(self) -> int:
        return sum(m != "store" for _, _, m in self.segments)


def _check_chain(act: Sequence[float], inp: Sequence[float], cost: Sequence[float]) -> int:
    n = len(act)
    if n == 0 or len(inp) != n or len(cost) != n:
        raise ValueError(f"act, inp and cost need the same non-zero length (got {len(act)}, {len(inp)}, {len(cost)})")
    if min(act) < 0 or min(inp) < 0 or min(cost) < 0:
        raise ValueError("act, inp and cost must be non-negative")
    return n


def _check_segments(segments: Sequence[Segment], n: int) -> None:
    pos = 0
    for s, e, m in segments:
        if s != pos or e <= s or m not in MODES:
            raise ValueError(f"segments must tile 0..{n} in order with mode in {MODES}; bad segment {(s, e, m)}")
        pos = e
    if pos != n:
        raise ValueError(f"segments cover 0..{pos} but the chain has {n} blocks")


def evaluate(segments: Sequence[Segment], act: Sequence[float], inp: Sequence[float], cost: Sequence[float]) -> Plan:
    """Kept bytes, peak bytes and recompute cost of ``segments`` under the cost model.
    ("selective" segments are treated as "full": the model does not know which ops they save.)"""
    n = _check_chain(act, inp, cost)
    _check_segments(segments, n)
    kept = rec = biggest = 0.0
    for s, e, m in segments:
        if m == "store":
            kept += sum(act[s:e])
        else:
            kept += inp[s]
            rec += sum(cost[s:e])
            biggest = max(biggest, sum(act[s:e]))
    return Plan(tuple(segments), kept, kept + biggest, rec)


def _fronts(act, inp, cost, cap: float, kept_cap: float):
    """For a cap on the bytes of any checkpointed segment: Pareto sets of (kept, recompute,
    segments) over prefixes, keeping only kept <= kept_cap."""
    n = len(act)
    pre = [0.0]
    for a in act:
        pre.append(pre[-1] + a)
    cpre = [0.0]
    for c in cost:
        cpre.append(cpre[-1] + c)
    fronts: list[list[tuple[float, float, tuple]]] = [[(0.0, 0.0, ())]]
    for i in range(1, n + 1):
        cands = [(k + act[i - 1], r, segs + ((i - 1, i, "store"),)) for k, r, segs in fronts[i - 1]]
        j = i - 1
        while j >= 0 and pre[i] - pre[j] <= cap:
            for k, r, segs in fronts[j]:
                cands.append((k + inp[j], r + cpre[i] - cpre[j], segs + ((j, i, "full"),)))
            j -= 1
        cands.sort(key=lambda t: (t[0], t[1]))
        front, best_r = [], math.inf
        for k, r, segs in cands:  # keep the points no other point beats on both axes
            if k <= kept_cap and r < best_r:
                front.append((k, r, segs))
                best_r = r
        fronts.append(front)
    return fronts[n]


def _caps(act) -> list[float]:
    n = len(act)
    return sorted({0.0} | {float(sum(act[j:i])) for j in range(n) for i in range(j + 1, n + 1)})


def _merge(segs: tuple) -> tuple[Segment, ...]:
    """Join neighbouring stored blocks into one stored segment (same cost, easier to read)."""
    out: list[Segment] = []
    for s, e, m in segs:
        if out and m == "store" and out[-1][2] == "store":
            out[-1] = (out[-1][0], e, "store")
        else:
            out.append((s, e, m))
    return tuple(out)


def optimal_front(act: Sequence[float], inp: Sequence[float], cost: Sequence[float]) -> list[Plan]:
    """Every plan on the optimal memory/recompute front (least recompute for its peak), sorted
    by peak. Exact: a dynamic program over the chain for each possible largest segment."""
    _check_chain(act, inp, cost)
    pts, total = [], float(sum(act))
    for cap in _caps(act):
        # a point is only worth having if its peak beats storing everything
        for _, _, segs in _fronts(act, inp, cost, cap, total - cap if cap else total):
            pts.append(evaluate(_merge(segs), act, inp, cost))
    pts.sort(key=lambda p: (p.peak, p.recompute))
    front, best_r = [], math.inf
    for p in pts:
        if p.recompute < best_r:
            front.append(p)
            best_r = p.recompute
    return front


def min_peak(act: Sequence[float], inp: Sequence[float], cost: Sequence[float] | None = None) -> float:
    """The smallest peak any plan reaches under the cost model."""
    _check_chain(act, inp, [0.0] * len(act) if cost is None else cost)
    return _min_peak_fast(act, inp)


def _min_peak_fast(act, inp) -> float:
    best = math.inf
    n = len(act)
    for cap in _caps(act):
        # least kept bytes with every checkpointed segment <= cap (a plain DP, no recompute axis)
        dp = [0.0] + [math.inf] * n
        for i in range(1, n + 1):
            dp[i] = dp[i - 1] + act[i - 1]
            j, tot = i - 1, act[i - 1]
            while j >= 0 and tot <= cap:
                dp[i] = min(dp[i], dp[j] + inp[j])
                j -= 1
                tot += act[j] if j >= 0 else 0
        best = min(best, dp[n] + cap)
    return best


def plan_for_budget(act: Sequence[float], inp: Sequence[float], cost: Sequence[float], budget: float) -> Plan:
    """The plan with the least recompute whose peak fits in ``budget`` (ties: smaller peak).

    Raises ValueError naming the smallest feasible budget when ``budget`` is below it."""
    n = _check_chain(act, inp, cost)
    best: Plan | None = None
    for cap in _caps(act):
        if cap > budget:
            break
        for k, r, segs in _fronts(act, inp, cost, cap, budget - cap):
            p = evaluate(_merge(segs), act, inp, cost)
            if p.peak <= budget and (best is None or (p.recompute, p.peak) < (best.recompute, best.peak)):
                best = p
    if best is None:
        lo = _min_peak_fast(act, inp)
        raise ValueError(
            f"budget={budget:g} is below the smallest peak any plan reaches for this "
            f"{n}-block chain ({lo:g}); raise the budget to at least {lo:g}"
        )
    return best


# -- ready-made schedules -----------------------------------------------------------------
def segments_none(n: int) -> list[Segment]:
    """No checkpointing: one stored segment."""
    return [(0, n, "store")]


def segments_every_k(n: int, k: int, mode: str = "full") -> list[Segment]:
    """Checkpoint consecutive segments of ``k`` blocks (the last may be shorter)."""
    if k < 1:
        raise ValueError(f"k={k}: a segment needs at least one block")
    return [(s, min(s + k, n), mode) for s in range(0, n, k)]


def segments_every_block(n: int) -> list[Segment]:
    """Checkpoint each block on its own: keeps every block input, recomputes every block once."""
    return segments_every_k(n, 1)


def segments_sqrt(n: int) -> list[Segment]:
    """Chen et al. (2016): about sqrt(n) checkpointed segments of about sqrt(n) blocks."""
    return segments_every_k(n, max(1, math.ceil(math.sqrt(n))))


def segments_checkpoint_sequential(n: int, segments: int) -> list[Segment]:
    """What ``torch.utils.checkpoint.checkpoint_sequential(model, segments, x)`` does: chunks of
    ``n // segments`` blocks, all checkpointed except the last chunk (which also takes the rest)."""
    if not 1 <= segments <= n:
        raise ValueError(f"segments={segments}: need 1 <= segments <= number of blocks ({n})")
    size = n // segments
    out = [(s, s + size, "full") for s in range(0, size * (segments - 1), size)]
    return out + [(size * (segments - 1), n, "store")]


def segments_selective(n: int) -> list[Segment]:
    """Each block in its own selective region (see ``selective_policy``)."""
    return segments_every_k(n, 1, mode="selective")


STRATEGIES = ("none", "every block", "every k", "checkpoint_sequential", "sqrt(N)", "selective")


def strategy_segments(name: str, n: int, k: int = 2) -> list[Segment]:
    """Segments of a named strategy in ``STRATEGIES`` (``k``: blocks per segment, or the number
    of segments for "checkpoint_sequential")."""
    table = {
        "none": lambda: segments_none(n),
        "every block": lambda: segments_every_block(n),
        "every k": lambda: segments_every_k(n, k),
        "sqrt(N)": lambda: segments_sqrt(n),
        "checkpoint_sequential": lambda: segments_checkpoint_sequential(n, k),
        "selective": lambda: segments_selective(n),
    }
    if name not in table:
        raise ValueError(f"strategy {name!r} is not one of {STRATEGIES}")
    return table[name]()


# -- selective policies ---------------------------------------------------------------------
MATMUL_OPS = frozenset(
    {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten.baddbmm.default,
        torch.ops.aten.linear.default,
        torch.ops.aten.matmul.default,
    }
)


def _note_outputs(out, source: str) -> None:
    for t in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(t, torch.Tensor):
            note_saved(t, source)


def selective_policy(save_ops: Iterable = MATMUL_OPS) -> Callable:
    """A policy for ``create_selective_checkpoint_contexts``: MUST_SAVE the outputs of
    ``save_ops`` (default: matrix products, costly to recompute), PREFER_RECOMPUTE everything
    else (pointwise ops: cheap). Saved outputs are reported to an active SavedTensorMeter."""
    save = frozenset(save_ops)

    def policy(ctx, op, *args, **kwargs):
        if op in save:
            _note_outputs(getattr(ctx, "op_output", None), "selective cache")
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class module_policy:
    """A policy deciding by the module that runs the op: MUST_SAVE inside modules named in
    ``save`` (``named_modules`` names of ``model``), PREFER_RECOMPUTE elsewhere. Use as a
    context manager (it hooks the modules) or call ``close()``."""

    def __init__(self, model: nn.Module, save: Iterable[str]):
        self.save = set(save)
        names = {n for n, _ in model.named_modules()}
        if self.save - names:
            raise ValueError(
                f"module_policy: {sorted(self.save - names)} are not modules of the model; "
                f"choose from {sorted(n for n in names if n)}"
            )
        self._stack: list[str] = []
        self._handles = []
        for name, mod in model.named_modules():
            if name:
                self._handles.append(mod.register_forward_pre_hook(lambda m, a, n=name: self._stack.append(n)))
                self._handles.append(mod.register_forward_hook(lambda m, a, o, n=name: self._pop(n), always_call=True))

    def _pop(self, name: str) -> None:  # a forward hook must return None (else it replaces the output)
        if self._stack and self._stack[-1] == name:
            self._stack.pop()

    def __call__(self, ctx, op, *args, **kwargs):
        if any(n in self.save for n in self._stack):
            _note_outputs(getattr(ctx, "op_output", None), "selective cache")
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> module_policy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- runners --------------------------------------------------------------------------------
def _tensors_in(obj, depth: int = 0):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth > 6:
        return
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors_in(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors_in(v, depth + 1)
    elif hasattr(obj, "val"):  # torch's _VersionWrapper around a cached output
        yield from _tensors_in(obj.val, depth + 1)


class _CountingForwardContext:
    """SAC's forward (caching) mode; on exit, reports every cached tensor not yet counted to an
    active SavedTensorMeter. Torch versions whose policy context lacks ``op_output`` (before
    2.13) are counted this way; newer ones are already counted, by module, by the policy."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        out = self.mode.__exit__(*exc)
        for t in _tensors_in(getattr(self.mode, "storage", {})):
            note_saved(t, "selective cache", only_new=True)
        return out


def _sac_contexts(policy: Callable):
    fwd, recompute = create_selective_checkpoint_contexts(policy)
    return _CountingForwardContext(fwd), recompute


def checkpoint_region(fn: Callable, *args, policy: Callable | None = None):
    """``checkpoint(fn, *args, use_reentrant=False)``, selective when ``policy`` is given
    (through ``create_selective_checkpoint_contexts``; what it caches is reported to an active
    SavedTensorMeter)."""
    if policy is None:
        return checkpoint(fn, *args, use_reentrant=False)
    return checkpoint(fn, *args, use_reentrant=False, context_fn=functools.partial(_sac_contexts, policy))


def run_chain(
    model: nn.Sequential,
    x: torch.Tensor,
    segments: Sequence[Segment] | str,
    *,
    policy: Callable | None = None,
    k: int = 2,
) -> torch.Tensor:
    """Run the blocks of ``model`` on ``x`` following ``segments`` (or a name in STRATEGIES).

    "full" segments use ``checkpoint(..., use_reentrant=False)``; "selective" ones add a
    selective policy (``policy``, default ``selective_policy()``); the strategy name
    "checkpoint_sequential" calls torch's ``checkpoint_sequential`` with ``k`` segments."""
    blocks = list(model.children()) if isinstance(model, nn.Sequential) else list(model)
    n = len(blocks)
    if isinstance(segments, str):
        if segments == "checkpoint_sequential":
            return checkpoint_sequential(model, k, x, use_reentrant=False)
        segments = strategy_segments(segments, n, k)
    _check_segments(segments, n)
    sel = policy or selective_policy()
    h = x
    for s, e, m in segments:
        part = nn.Sequential(*blocks[s:e]) if e - s > 1 else blocks[s]
        if m == "store":
            h = part(h)
        else:
            h = checkpoint_region(part, h, policy=sel if m == "selective" else None)
    return h


# -- measuring strategies on a real chain -----------------------------------------------------
def profile_blocks(model: nn.Sequential, x: torch.Tensor) -> tuple[list[int], list[int], list[int]]:
    """Measured, block by block: bytes each block saves for backward (its input included when it
    saves it; parameters excluded), bytes of its input, and its forward FLOPs. These are the
    ``act``, ``inp`` and ``cost`` the planner takes."""
    from lab_utils.memory import SavedTensorMeter
    from lab_utils.recompute import count_flops

    act, inp, cost = [], [], []
    h = x.detach()
    for blk in model:
        h = h.detach().requires_grad_(h.is_floating_point())  # as in the middle of a chain
        with SavedTensorMeter(blk) as meter:
            out = blk(h)
        act.append(meter.total_bytes)
        inp.append(h.untyped_storage().nbytes())
        cost.append(count_flops(lambda: blk(h)))
        h = out
    return act, inp, cost


def compare_strategies(
    model: nn.Sequential,
    x: torch.Tensor,
    strategies: dict,
    *,
    loss_fn: Callable[[torch.Tensor], torch.Tensor] = lambda y: y.pow(2).mean(),
    k: int = 2,
    repeat: int = 3,
    warmup: int = 2,
    profile_cpu: bool = False,
    blocks: tuple[list[int], list[int], list[int]] | None = None,
    progress: bool = False,
) -> list[dict]:
    """Run one training step of ``model`` on ``x`` per strategy and measure it (``progress``:
    show a progress bar over the strategies).

    ``strategies``: name -> segments, a name in STRATEGIES, or (segments, policy). Each result
    row holds: kept (saved bytes after the forward, SavedTensorMeter), peak_model (kept + the
    largest checkpointed segment's measured bytes: the planner's peak), peak (allocator peak of
    the step: CUDA max_memory_allocated, or the profiler's CPU peak with ``profile_cpu``, else
    None), forward_flops, total_flops (forward + backward), extra_flops (total minus no checkpointing's), recomputed
    (module calls re-run in backward), seconds (fastest of ``repeat`` steps after ``warmup``) and
    grad_diff (largest gradient difference from no checkpointing)."""
    from lab_utils.memory import measure_step
    from lab_utils.recompute import measure_recompute
    from lab_utils.timing import time_fn

    n = len(model)
    act, _, _ = blocks or profile_blocks(model, x)
    params = [p for p in model.parameters() if p.requires_grad]

    def grads_of(fn) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss_fn(fn()).backward()
        return [p.grad.detach().clone() for p in params]

    base_fn = lambda: model(x)  # noqa: E731
    ref = grads_of(base_fn)
    base_total = measure_recompute(model, lambda: loss_fn(base_fn())).total_flops
    rows = []
    from lab_utils.timing import progress as bar

    for name, spec in bar(strategies.items(), desc="strategies", total=len(strategies), disable=not progress):
        segs, pol = spec if isinstance(spec, tuple) else (spec, None)
        fn = lambda s=segs, p=pol: run_chain(model, x, s, policy=p, k=k)
        if isinstance(segs, str):
            segs_model = (
                segments_checkpoint_sequential(n, k)
                if segs == "checkpoint_sequential"
                else strategy_segments(segs, n, k)
            )
        else:
            segs_model = list(segs)
        got = grads_of(fn)
        diff = max(float((g - r).abs().max()) for g, r in zip(got, ref))
        # gradients stay allocated (zeroed, not freed), as from the second step of a training
        # loop on: the peak then measures activations and temporaries, not the gradients
        model.zero_grad(set_to_none=False)
        mem = measure_step(model, lambda: loss_fn(fn()), exclude=[x], profile_cpu=profile_cpu)
        rec = measure_recompute(model, lambda: loss_fn(fn()))

        def step():
            model.zero_grad(set_to_none=False)
            loss_fn(fn()).backward()

        # min: robust to a busy machine; repeat=0 skips timing (seconds = nan)
        secs = time_fn(step, warmup=warmup, repeat=repeat).min if repeat > 0 else float("nan")
        biggest = max((sum(act[s:e]) for s, e, m in segs_model if m != "store"), default=0)
        rows.append(
            dict(
                name=name,
                segments=segs_model,
                kept=mem.saved_bytes,
                peak_model=mem.saved_bytes + biggest,
                peak=mem.peak_cuda_bytes if mem.peak_cuda_bytes is not None else mem.peak_cpu_bytes,
                forward_flops=rec.forward_flops,
                total_flops=rec.total_flops,
                extra_flops=rec.total_flops - base_total,
                recomputed=rec.n_recomputed_calls,
                seconds=secs,
                grad_diff=diff,
            )
        )
    model.zero_grad(set_to_none=True)
    return rows


def results_table(rows: list[dict], *, base: str | None = None) -> str:
    """A fixed-width text table of ``compare_strategies`` rows, relative to the ``base`` row
    (default: the first)."""
    from lab_utils.memory import fmt_bytes

    b = next((r for r in rows if r["name"] == base), rows[0])
    lines = [
        f"{'strategy':<24}{'kept':>11}{'kept/base':>10}{'peak(model)':>13}{'alloc peak':>12}"
        f"{'extra fwd FLOPs':>16}{'re-run calls':>13}{'time':>10}{'time/base':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r['name']:<24}{fmt_bytes(r['kept']):>11}{r['kept'] / b['kept']:>10.1%}"
            f"{fmt_bytes(r['peak_model']):>13}{fmt_bytes(r['peak']):>12}"
            f"{r['extra_flops'] / r['forward_flops']:>16.2f}{r['recomputed']:>13}"
            f"{r['seconds'] * 1e3:>8.1f}ms{r['seconds'] / b['seconds']:>10.2f}"
        )
    return "\n".join(lines)
