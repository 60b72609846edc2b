"""Graders of lab 1's exercises: each runs the student's code on a small chain and measures it.

    exercises.check_every_k(forward_every_k)                     # ckpt-every-k
    exercises.check_hooks(checkpoint_by_hooks)                   # ckpt-hooks
    exercises.check_prediction(predicted_bytes, PLAN, **CHAIN)   # ckpt-predict (predict, then measure)
    exercises.check_policy(budget_policy)                        # ckpt-policy

torch's CheckpointError from the student's code is a ✗ that says what it means. The references
run on the grader's own model, by private runners (nothing here is exported to run a chain).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import numbers
from collections.abc import Callable, Iterator, Sequence
from unittest import mock

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn
from torch.utils.checkpoint import CheckpointError, CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from lab_utils.checks import grader, param_max_diff
from lab_utils.labs.lab01_checkpointing.measure import AliveActivations
from lab_utils.labs.lab01_checkpointing.policies import CensusRow, Policy, counted, op_census, op_key
from lab_utils.labs.lab01_checkpointing.schedules import Segment, check_segments
from lab_utils.memory import SavedTensorMeter, fmt_bytes
from lab_utils.memory.recompute import CallCounter, count_flops, measure_recompute
from lab_utils.models import mlp, transformer_chain

__all__ = ["check_prediction", "check_every_k", "check_hooks", "check_policy", "POLICY_TARGETS"]

POLICY_TARGETS = dict(seqs=(16, 64), budget=1 / 2)  # ckpt-policy: sequence lengths; budget / linear outputs' bytes


def _run_plan(model: nn.Sequential, x: torch.Tensor, plan: Sequence[Segment]) -> torch.Tensor:
    """The grader's reference: "store" segments run as usual, "full" ones under one checkpoint."""
    check_segments(plan, len(model))
    h = x
    for s, e, mode in plan:
        h = model[s:e](h) if mode == "store" else checkpoint(model[s:e], h, use_reentrant=False)
    return h


def _selective(model: nn.Sequential, x: torch.Tensor, policy: Policy | None) -> torch.Tensor:
    """Every block in its own selective region (the meter sees the policy's cache); plain if no policy."""
    if policy is None:
        return model(x)
    contexts = functools.partial(create_selective_checkpoint_contexts, counted(policy))
    h = x
    for blk in model:
        h = checkpoint(blk, h, use_reentrant=False, context_fn=contexts)
    return h


@contextlib.contextmanager
def _explained_checkpoint_errors(what: str) -> Iterator[None]:
    """torch's CheckpointError (the replay in backward did not match the forward) as a ✗ that says so."""
    try:
        yield
    except CheckpointError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise AssertionError(
            f"torch.utils.checkpoint raised CheckpointError ({first[:160]}): the replay in backward must run the "
            f"same ops on the same inputs as the forward did; {what}"
        ) from None


@contextlib.contextmanager
def _torch_checkpoint_spies() -> Iterator[dict[str, mock.MagicMock]]:
    """Spies on ``torch.utils.checkpoint``, however it was imported (both variants go through these two)."""
    gen, fn = torch_checkpoint._checkpoint_without_reentrant_generator, torch_checkpoint.CheckpointFunction
    with (
        mock.patch.object(torch_checkpoint, gen.__name__, wraps=gen) as plain,
        mock.patch.object(fn, "apply", wraps=fn.apply) as reentrant,
    ):
        yield {"checkpoint(use_reentrant=False)": plain, "checkpoint(use_reentrant=True)": reentrant}


def _loss(y: torch.Tensor) -> torch.Tensor:
    return y.pow(2).mean()


def _grads(model: nn.Module, run: Callable[[], torch.Tensor], x: torch.Tensor | None = None) -> list:
    model.zero_grad(set_to_none=True)
    if x is not None:
        x.grad = None
    y = run()
    assert y.requires_grad, "the output has no grad_fn, so all gradients are missing: the graph got lost"
    _loss(y).backward()
    out = [p.grad for p in model.parameters()] + ([x.grad] if x is not None else [])
    return [None if g is None else g.detach().clone() for g in out]


def _kept_and_reruns(model: nn.Module, x: torch.Tensor, forward: Callable[[], torch.Tensor]) -> tuple[int, dict]:
    """Bytes the forward keeps for backward (batch excluded), and the module calls re-run in backward."""
    with CallCounter(model) as calls:
        with SavedTensorMeter(model, exclude=[x]) as meter:
            y = forward()
        _loss(y).backward()
    return meter.total_bytes, dict(calls.recomputed)


def _same_grads(got: list, ref: list, what: str) -> None:
    missing = sum(g is None for g in got)
    assert not missing, f"{what}: {missing} of {len(got)} gradients are missing (None): part of the graph got lost"
    worst = param_max_diff(got, ref)
    assert worst <= 1e-5, f"{what}: gradients differ from plain autograd's (max diff {worst:.2g})"


@grader(
    "ckpt-predict",
    "predict the bytes kept",
    hint="reread section 2 (the MLP table): a stored block keeps its input and its Linear output; a "
    "checkpointed segment "
    "keeps only its input; the batch itself is not counted (it lives anyway)",
)
def check_prediction(predicted_bytes: int, plan: Sequence[Segment], *, n_blocks: int, width: int, rows: int) -> str:
    torch.manual_seed(0)
    model, x = mlp(width=width, depth=n_blocks, seed=0), torch.randn(rows, width)
    with SavedTensorMeter(model, exclude=[x]) as meter:
        _run_plan(model, x, list(plan))
    measured = meter.total_bytes
    if isinstance(predicted_bytes, bool) or not isinstance(predicted_bytes, numbers.Real):  # numpy's ints too
        raise AssertionError(f"give a number of bytes (an int), got {type(predicted_bytes).__name__}")
    assert predicted_bytes == measured, (
        f"you predicted {predicted_bytes} bytes: too {'high' if predicted_bytes > measured else 'low'}, the meter "
        + (
            "measured fewer (did you count the batch, or what a checkpointed segment computes inside?)"
            if predicted_bytes > measured
            else "measured more (a stored block keeps two tensors; each checkpointed segment keeps its input)"
        )
    )
    return f"{fmt_bytes(meter.total_bytes)}, as measured"


@grader(
    "ckpt-every-k",
    "checkpoint every k blocks",
    hint="reread section 1 (how ABC.forward checkpoints its region, use_reentrant=False): the batch needs no "
    "gradient, and the reentrant variant then gives the weights none",
)
def check_every_k(forward_every_k: Callable[[nn.Sequential, torch.Tensor, int], torch.Tensor]) -> str:
    n, width, rows = 7, 32, 8
    model, x = mlp(width=width, depth=n, seed=0), torch.randn(rows, width)  # a batch: no grad
    ref = _grads(model, lambda: model(x))
    out = []
    for k in (2, 3):
        groups = -(-n // k)
        plan = [(s, min(s + k, n), "full") for s in range(0, n, k)]
        want, want_calls = _kept_and_reruns(model, x, lambda plan=plan: _run_plan(model, x, plan))
        with (
            _explained_checkpoint_errors("call checkpoint(group, h, use_reentrant=False) on each group once"),
            _torch_checkpoint_spies() as spies,
        ):
            got = _grads(model, lambda k=k: forward_every_k(model, x, k))
            _same_grads(got, ref, f"k={k}")
            kept, calls = _kept_and_reruns(model, x, lambda k=k: forward_every_k(model, x, k))
        reentrant = spies["checkpoint(use_reentrant=True)"].called
        assert kept == want, (
            f"k={k}: the forward keeps {fmt_bytes(kept)} for backward; {groups} checkpointed groups of "
            f"{k} blocks keep {fmt_bytes(want)} (their inputs, the batch excluded)"
        )
        assert calls == want_calls, (
            f"k={k}: the modules re-run in backward are not those of {groups} checkpointed groups "
            f"({sum(calls.values())} calls re-run, expected {sum(want_calls.values())})"
        )
        out.append(f"k={k}: {fmt_bytes(kept)} kept")
    note = (
        " (use_reentrant=True: right here only because your input requires grad; torch's docstring "
        "recommends use_reentrant=False, which needs no such step)"
        if reentrant
        else ""
    )
    return ", ".join(out) + ", same gradients" + note


@grader(
    "ckpt-hooks",
    "checkpoint with saved-tensor hooks",
    hint="reread 'Saved-tensor hooks, in order': pack returns an index and keeps nothing; the first unpack runs "
    "fn(x) again under torch.enable_grad() and hooks of its own that collect the tensors, in the same order; "
    "unpack returns the one at its index",
)
def check_hooks(checkpoint_fn: Callable[[Callable, torch.Tensor], torch.Tensor]) -> str:
    model = mlp(width=32, depth=4, seed=0)
    x = torch.randn(8, 32, requires_grad=True)  # an earlier layer's output: it needs a gradient too
    with AliveActivations(model) as alive:
        y = model(x)
    plain = alive.bytes(exclude=[x, y])
    del y
    ref = _grads(model, lambda: model(x), x)
    model.zero_grad(set_to_none=True)
    x.grad = None
    with _torch_checkpoint_spies() as spies, CallCounter(model) as calls:
        with AliveActivations(model) as alive:
            y = checkpoint_fn(model, x)
        kept = alive.bytes(exclude=[x, y])
        used = [name for name, spy in spies.items() if spy.called]
        assert not used, (
            f"your function calls torch's {used[0]}: the exercise is to drop and rebuild with your own "
            "saved_tensors_hooks (pack keeps an index, unpack replays fn once and returns the tensor at that index)"
        )
        assert kept == 0, (
            f"after the forward {fmt_bytes(kept)} of activations are still in memory (plain autograd keeps "
            f"{fmt_bytes(plain)}): pack must not hold on to the tensor"
        )
        try:
            _loss(y).backward()
        except IndexError as err:  # the replay saved fewer tensors than the forward's pack numbered
            raise AssertionError(
                f"in backward your unpack raised IndexError ({err}): an index pack returned is not among the "
                "tensors the replay collected. If the replay collected none: autograd runs backward with grad "
                "mode off, and replayed ops save nothing unless the replay runs under torch.enable_grad(); "
                "otherwise, pack must number the tensors from 0 in the order they are saved"
            ) from None
    leaves = [n for n, m in model.named_modules() if n and not list(m.children())]
    reruns = {n: calls.recomputed[n] for n in leaves}
    assert all(r == 1 for r in reruns.values()), (
        f"each module should run exactly once more in backward; re-runs per module: {reruns}"
    )
    _same_grads([p.grad for p in model.parameters()] + [x.grad], ref, "checkpoint_by_hooks")
    return f"0 B kept alive (plain: {fmt_bytes(plain)}), each module re-run once, same gradients"


def _policy_run(model: nn.Sequential, x: torch.Tensor, policy: Policy | None) -> tuple[int, int, int, list]:
    """Bytes kept by the forward (the loss's own included, alike for every policy), total and
    forward FLOPs of the step, gradients: all from one step."""
    model.zero_grad(set_to_none=True)
    meter = SavedTensorMeter(model, exclude=[x])
    rep = measure_recompute(model, lambda: _loss(_selective(model, x, policy)), meter=meter)
    grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
    return meter.total_bytes, rep.total_flops, rep.forward_flops, grads


def _saving(keys: set[tuple]) -> Policy:
    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op_key(op, args) in keys else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _greedy_keys(census: list[CensusRow], budget: int) -> set[tuple]:
    """The exercise's rule: products from the most FLOPs per byte down, the block's last one skipped
    (early stop: the replay never reaches it), each row that fits what is left of the budget saved."""
    products = [r for r in census if r.flops > 0]
    last = max(r.index for r in products)
    keep, used = set(), 0
    for r in sorted(products, key=lambda r: -r.flops_per_byte):
        if r.index != last and used + r.out_bytes <= budget:
            keep.add(r.key)
            used += r.out_bytes
    return keep


def _best_cached(model: nn.Sequential, x: torch.Tensor, census: list[CensusRow], budget: int) -> int:
    """Most FLOPs a cache of at most ``budget`` bytes per block spares the replays, over every set of
    a block's products (brute force: six), each product's saving measured on one block."""
    products = [r for r in census if r.flops > 0]

    def step_flops(policy: Policy) -> int:  # forward and backward of one block, nothing else measured
        h = x.detach().requires_grad_()
        flops = count_flops(lambda: _loss(_selective(model[:1], h, policy)).backward())
        model.zero_grad(set_to_none=True)
        return flops

    every = step_flops(_saving(set()))
    spared = [len(model) * (every - step_flops(_saving({r.key}))) for r in products]
    best = 0
    for pick in itertools.product((False, True), repeat=len(products)):
        if sum(r.out_bytes for r, p in zip(products, pick) if p) <= budget:
            best = max(best, sum(f for f, p in zip(spared, pick) if p))
    return best


@grader(
    "ckpt-policy",
    "a policy under a byte budget",
    hint="reread 'Which outputs to keep: FLOPs per byte' and 'A cache nobody reads': take the census rows with "
    "FLOPs from the most FLOPs per byte down, skip the block's last product (the largest index: the replay never "
    "reaches it) and any row that does not fit in what is left of the budget (skip it and go on), and save "
    "exactly those keys",
)
def check_policy(budget_policy: Callable[[list[CensusRow], int], Policy]) -> str:
    model = transformer_chain(n_blocks=2, d_model=32, n_heads=4, seed=0)
    torch.manual_seed(0)
    lines = []
    for seq in POLICY_TARGETS["seqs"]:
        x = torch.randn(2, seq, 32)
        census = op_census(model[0], x)
        linear = sum(r.out_bytes for r in census if r.op in ("aten.addmm.default", "aten.mm.default"))
        budget = round(POLICY_TARGETS["budget"] * linear)  # below the linear layers' outputs
        _, base_total, fwd, ref = _policy_run(model, x, None)
        floor, all_total, _, _ = _policy_run(model, x, _saving(set()))  # recompute everything
        _, greedy_total, _, _ = _policy_run(model, x, _saving(_greedy_keys(census, budget)))
        rule = greedy_total - base_total  # what the exercise's rule recomputes, measured
        best = all_total - base_total - _best_cached(model, x, census, budget)
        with _explained_checkpoint_errors(
            "a policy is called once per op, in the forward only (torch 2.13), and must return a "
            "CheckpointPolicy (decide by policies.op_key(op, args))"
        ):
            kept, total, _, got = _policy_run(model, x, budget_policy(census, budget))
        _same_grads(got, ref, f"seq {seq}, with your policy")
        cache, extra = (kept - floor) // len(model), total - base_total
        assert cache <= budget, (
            f"seq {seq}: your policy keeps {fmt_bytes(cache)} per block beyond recompute-everything; "
            f"the budget is {fmt_bytes(budget)}: too many outputs saved"
        )
        assert extra <= rule, (
            f"seq {seq}: backward recomputes {extra / fwd:.2f} of a forward in FLOPs; the rule of the exercise "
            f"(most FLOPs per byte first, the last product skipped, a row that does not fit skipped) recomputes "
            f"{rule / fwd:.2f} within {fmt_bytes(budget)} per block: too few FLOPs spared per byte"
        )
        lines.append(
            f"seq {seq}: {fmt_bytes(cache)} of {fmt_bytes(budget)} per block, {extra / fwd:.2f} extra FLOPs "
            f"(the best of every set: {best / fwd:.2f})"
        )
    return "; ".join(lines)
