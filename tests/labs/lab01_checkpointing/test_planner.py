"""The planner against brute force, the sqrt(N) rule, and its error for a budget too small."""

import itertools
import math
import random

import pytest

from lab_utils.labs.lab01_checkpointing.planner import evaluate, min_peak, optimal_front, plan_for_budget
from lab_utils.labs.lab01_checkpointing.schedules import segments_sqrt


def all_plans(n):
    """Every plan, independently of the DP: cut points, then a flag per segment."""
    for cuts in itertools.product([0, 1], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        segs = list(zip(bounds[:-1], bounds[1:]))
        for flags in itertools.product(["store", "full"], repeat=len(segs)):
            yield [(s, e, f) for (s, e), f in zip(segs, flags)]


def test_evaluate_by_hand():
    act, inp, cost = [4, 4, 4, 4], [1, 1, 1, 1], [10, 10, 10, 10]
    p = evaluate([(0, 2, "full"), (2, 3, "store"), (3, 4, "full")], act, inp, cost)
    # segment (0, 2) is rebuilt with nothing before it (8, + its output's gradient 1); (3, 4) with
    # the 1 + 4 before it (4 + 1)
    assert (p.kept, p.peak, p.recompute) == (1 + 4 + 1, 5 + 4 + 1, 30)
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
            evals = [evaluate(s, act, inp, cost) for s in plans]
            lo = min(e.peak for e in evals)
            assert min_peak(act, inp) == lo
            for budget in sorted({lo, (lo + sum(act)) / 2, sum(act), rng.uniform(lo, sum(act))}):
                got = plan_for_budget(act, inp, cost, budget)
                ref = min(e.recompute for e in evals if e.peak <= budget)  # brute force
                assert got.recompute == ref and got.peak <= budget
                assert evaluate(got.segments, act, inp, cost) == got
            # the front: no brute-force plan beats a front point on both axes
            front = optimal_front(act, inp, cost)
            for p in front:
                assert not any(e.peak <= p.peak and e.recompute < p.recompute for e in evals)


def test_in_flight_bytes_land_on_the_backwards_start():
    rng = random.Random(2)
    n = 7
    act = [rng.randint(1, 9) for _ in range(n)]
    inp = [rng.randint(1, 4) for _ in range(n)]
    cost = [rng.randint(1, 9) for _ in range(n)]
    g = 5
    plans = list(all_plans(n))
    stored = evaluate([(0, n, "store")], act, inp, cost, in_flight=g)
    assert stored.peak == sum(act) + g
    lo = min(evaluate(s, act, inp, cost, g).peak for s in plans)
    assert min_peak(act, inp, in_flight=g) == lo
    for budget in (lo, (lo + sum(act) + g) / 2):
        ref = min(
            evaluate(s, act, inp, cost, g).recompute for s in plans if evaluate(s, act, inp, cost, g).peak <= budget
        )
        got = plan_for_budget(act, inp, cost, budget, in_flight=g)
        assert got.recompute == ref and got.peak <= budget
    with pytest.raises(ValueError, match="in_flight"):
        evaluate([(0, n, "store")], act, inp, cost, in_flight=-1)


def test_planner_equals_brute_force_at_ten_blocks():
    rng = random.Random(1)
    act = [rng.randint(1, 9) for _ in range(10)]
    inp = [rng.randint(1, 4) for _ in range(10)]
    cost = [rng.randint(1, 9) for _ in range(10)]
    plans = [evaluate(s, act, inp, cost) for s in all_plans(10)]
    for budget in (min(p.peak for p in plans), sum(act) * 0.5, sum(act) * 0.8):
        ref = min(p.recompute for p in plans if p.peak <= budget)
        assert plan_for_budget(act, inp, cost, budget).recompute == ref


@pytest.mark.parametrize("n", [16, 36, 64])
def test_sqrt_rule_on_uniform_chains(n):
    # blocks that save only their input: k equal segments peak at (k - 1) + n/k + 1 (the gradient
    # reaching the segment), 2 sqrt(n) at k = sqrt(n); segments that shrink toward the end go lower
    act, inp, cost = [1.0] * n, [1.0] * n, [1.0] * n
    sqrt_peak = evaluate(segments_sqrt(n), act, inp, cost).peak
    assert sqrt_peak == 2 * math.isqrt(n)
    lo = min_peak(act, inp)
    assert math.sqrt(2 * n) <= lo < sqrt_peak
    plan = plan_for_budget(act, inp, cost, lo)
    sizes = [e - s for s, e, _ in plan.segments]
    assert sizes == sorted(sizes, reverse=True) and plan.segments[-1][2] == "store"


def test_a_stored_last_segment_peaks_no_higher():
    # what checkpoint_sequential does: its last chunk stored peaks no higher than checkpointing it
    act, inp, cost = [2.0] * 16, [1.0] * 16, [1.0] * 16
    ckpt_all = evaluate([(s, s + 4, "full") for s in range(0, 16, 4)], act, inp, cost)
    last_stored = evaluate([(0, 4, "full"), (4, 8, "full"), (8, 12, "full"), (12, 16, "store")], act, inp, cost)
    # all checkpointed: the last segment rebuilt on top of 3 inputs (3 + 8 + 1); last stored: the
    # forward ends with 3 inputs + 8 kept, and the third segment is rebuilt on 2 inputs (2 + 8 + 1)
    assert (ckpt_all.peak, last_stored.peak) == (12, 11) and last_stored.recompute < ckpt_all.recompute


def test_budget_below_minimum_names_it():
    act, inp, cost = [2.0] * 16, [1.0] * 16, [1.0] * 16
    lo = min_peak(act, inp)
    with pytest.raises(ValueError, match=f"at least {lo:g}"):
        plan_for_budget(act, inp, cost, lo - 0.5)
    assert plan_for_budget(act, inp, cost, sum(act)).segments == ((0, 16, "store"),)
