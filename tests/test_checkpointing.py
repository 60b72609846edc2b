"""The planner against brute force, the sqrt(N) rule, and runners against plain autograd."""

import itertools
import math
import random

import pytest
import torch

from lab_utils.checkpointing import (
    MATMUL_OPS,
    STRATEGIES,
    evaluate,
    min_peak,
    module_policy,
    optimal_front,
    plan_for_budget,
    run_chain,
    segments_sqrt,
    selective_policy,
)
from lab_utils.memory import SavedTensorMeter
from lab_utils.models import mlp, transformer_chain


def all_plans(n):
    """Every plan, independently of the DP: cut points, then a flag per segment."""
    for cuts in itertools.product([0, 1], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        segs = list(zip(bounds[:-1], bounds[1:]))
        for flags in itertools.product(["store", "full"], repeat=len(segs)):
            yield [(s, e, f) for (s, e), f in zip(segs, flags)]


def brute(act, inp, cost, budget):
    best = None
    for segs in all_plans(len(act)):
        p = evaluate(segs, act, inp, cost)
        if p.peak <= budget and (best is None or p.recompute < best.recompute):
            best = p
    return best


def test_evaluate_by_hand():
    act, inp, cost = [4, 4, 4, 4], [1, 1, 1, 1], [10, 10, 10, 10]
    p = evaluate([(0, 2, "full"), (2, 3, "store"), (3, 4, "full")], act, inp, cost)
    assert (p.kept, p.peak, p.recompute) == (1 + 4 + 1, 6 + 8, 30)
    assert p.checkpointed_blocks == [0, 1, 3]
    with pytest.raises(ValueError, match="tile"):
        evaluate([(0, 2, "full"), (3, 4, "full")], act, inp, cost)


def test_planner_equals_brute_force_on_random_chains():
    rng = random.Random(0)
    for n in range(1, 9):
        for _ in range(3):
            act = [rng.randint(1, 9) for _ in range(n)]
            inp = [rng.randint(1, 4) for _ in range(n)]
            cost = [rng.randint(1, 9) for _ in range(n)]
            plans = list(all_plans(n))
            lo = min(evaluate(s, act, inp, cost).peak for s in plans)
            assert min_peak(act, inp) == lo
            for budget in sorted({lo, (lo + sum(act)) / 2, sum(act), rng.uniform(lo, sum(act))}):
                got, ref = plan_for_budget(act, inp, cost, budget), brute(act, inp, cost, budget)
                assert got.recompute == ref.recompute and got.peak <= budget
                assert evaluate(got.segments, act, inp, cost) == got
            # the front: no brute-force plan beats a front point on both axes
            front = optimal_front(act, inp, cost)
            for p in front:
                assert not any(
                    evaluate(s, act, inp, cost).peak <= p.peak and evaluate(s, act, inp, cost).recompute < p.recompute
                    for s in plans
                )


def test_planner_equals_brute_force_at_ten_blocks():
    rng = random.Random(1)
    act = [rng.randint(1, 9) for _ in range(10)]
    inp = [rng.randint(1, 4) for _ in range(10)]
    cost = [rng.randint(1, 9) for _ in range(10)]
    plans = [evaluate(s, act, inp, cost) for s in all_plans(10)]
    for budget in (min(p.peak for p in plans), sum(act) * 0.5, sum(act) * 0.8):
        ref = min(p.recompute for p in plans if p.peak <= budget)
        assert plan_for_budget(act, inp, cost, budget).recompute == ref


@pytest.mark.parametrize("n", [16, 36, 64, 100])
def test_sqrt_rule_on_uniform_chains(n):
    # k segments: peak = k + n/k, smallest (2*sqrt(n)) at k = sqrt(n)
    act, inp, cost = [1.0] * n, [1.0] * n, [1.0] * n
    lo = min_peak(act, inp)
    assert lo == 2 * math.isqrt(n) == evaluate(segments_sqrt(n), act, inp, cost).peak
    plan = plan_for_budget(act, inp, cost, lo)
    assert plan.n_checkpointed_segments == math.isqrt(n) and plan.recompute == n


def test_budget_below_minimum_names_it():
    act, inp, cost = [2.0] * 16, [1.0] * 16, [1.0] * 16
    lo = min_peak(act, inp)
    with pytest.raises(ValueError, match=f"at least {lo:g}"):
        plan_for_budget(act, inp, cost, lo - 0.5)
    assert plan_for_budget(act, inp, cost, sum(act)).segments == ((0, 16, "store"),)


def test_measured_kept_bytes_match_the_model():
    # MLP block: keeps its input and its Linear output (act = 2 x input bytes)
    b, w, n = 4, 16, 9
    model, x = mlp(width=w, depth=n), torch.randn(b, w)
    unit = b * w * 4
    act, inp, cost = [2 * unit] * n, [unit] * n, [1] * n
    for segs in (segments_sqrt(n), plan_for_budget(act, inp, cost, 10 * unit).segments):
        with SavedTensorMeter(model) as m:
            run_chain(model, x, segs).sum()
        assert m.total_bytes == evaluate(segs, act, inp, cost).kept


def grads(model, fn):
    model.zero_grad()
    fn().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_every_strategy_gives_the_plain_gradients(kind):
    if kind == "mlp":
        model, x = mlp(width=16, depth=6), torch.randn(4, 16, requires_grad=True)
    else:
        model, x = transformer_chain(n_blocks=4, d_model=16, n_heads=2), torch.randn(2, 5, 16)
    ref = grads(model, lambda: model(x).pow(2).mean())
    n = len(model)
    plan = plan_for_budget([2.0] * n, [1.0] * n, [1.0] * n, min_peak([2.0] * n, [1.0] * n))
    runs = {s: (s, None) for s in STRATEGIES} | {
        "plan": (list(plan.segments), None),
        "selective mm only": ("selective", selective_policy([torch.ops.aten.mm.default])),
    }
    assert MATMUL_OPS
    for name, (segs, pol) in runs.items():
        got = grads(model, lambda: run_chain(model, x, segs, policy=pol, k=2).pow(2).mean())
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6, msg=name)


def test_module_policy_rejects_unknown_names():
    model = mlp(width=8, depth=2)
    with pytest.raises(ValueError, match="not modules"):
        module_policy(model, {"nope"})
    with module_policy(model, {"0.linear"}) as pol:
        x = torch.randn(2, 8)
        with SavedTensorMeter(model) as m:
            run_chain(model, x, [(0, 2, "selective")], policy=pol).sum()
    # region input + the cached output of block 0's Linear
    assert m.total_bytes == 2 * 2 * 8 * 4
