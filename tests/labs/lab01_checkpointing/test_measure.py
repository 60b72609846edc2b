"""Measuring forward functions from outside: kept bytes belong to the chain (not the loss), the
segments rebuilt, gradients unchanged, liveness after a forward."""

import math
import time

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from lab_utils.labs.lab01_checkpointing.measure import (
    AliveActivations,
    StrategyRow,
    compare_strategies,
    interleaved_min,
    profile_blocks,
    results_table,
)
from lab_utils.labs.lab01_checkpointing.planner import evaluate, min_peak, plan_for_budget
from lab_utils.labs.lab01_checkpointing.policies import module_policy, selective_policy
from lab_utils.labs.lab01_checkpointing.schedules import segments_checkpoint_sequential, segments_sqrt
from lab_utils.memory import SavedTensorMeter
from lab_utils.models import mlp, transformer_chain
from tests.helpers.chains import (
    forward_every_block,
    forward_plain,
    forward_segments,
    forward_sequential,
)
from tests.labs.lab01_checkpointing.chains import forward_selective

N, B, W = 5, 4, 16
UNIT = B * W * 4


@pytest.fixture
def chain():
    return mlp(width=W, depth=N, seed=0), torch.randn(B, W)


def test_profile_of_an_mlp_block(chain):
    act, inp, cost = profile_blocks(*chain)
    assert act == [2 * UNIT] * N and inp == [UNIT] * N  # its input (for Linear) and the Linear output (for GELU)
    assert cost == [2 * B * W * W] * N


@pytest.mark.parametrize("loss_fn", [lambda y: y.sum(), lambda y: y.pow(2).mean()])
def test_kept_counts_the_chain_not_the_loss(chain, loss_fn):
    # every block checkpointed keeps the N - 1 inner block inputs (the batch is excluded), whatever
    # the loss saves: pow(2) saves the chain's output, sum() nothing
    rows = compare_strategies(
        *chain, {"none": forward_plain, "every block": forward_every_block}, loss_fn=loss_fn, repeat=0
    )
    kept = {r.name: r.kept for r in rows}
    assert kept == {"none": (2 * N - 1) * UNIT, "every block": (N - 1) * UNIT}
    assert all(r.grad_diff <= 1e-6 for r in rows)
    assert all(type(r) is StrategyRow and math.isnan(r.seconds) for r in rows)  # repeat=0: not timed
    # position-aware: the last block is rebuilt (2 units, its input included) as its output's
    # gradient arrives (1) while the inputs of blocks 1..N-2 are still kept; the batch not counted
    assert rows[1].peak_model == (N - 2) * UNIT + 2 * UNIT + UNIT


def test_cpu_peak_is_measured_and_lower_with_checkpointing():
    model, x = mlp(width=64, depth=8, seed=0), torch.randn(256, 64)
    rows = compare_strategies(
        model, x, {"none": forward_plain, "every block": forward_every_block}, repeat=0, profile_cpu=True
    )
    assert all(r.peak > 0 for r in rows)
    assert rows[1].peak < rows[0].peak


def test_results_table_has_a_line_per_strategy_relative_to_the_first(chain):
    rows = compare_strategies(*chain, {"none": forward_plain, "every block": forward_every_block}, repeat=1)
    assert all(r.seconds > 0 for r in rows)
    header, none, every = results_table(rows).splitlines()
    assert header.startswith("strategy") and none.startswith("none") and every.startswith("every block")
    assert "100.0%" in none and f"{rows[1].kept / rows[0].kept:.1%}" in every
    assert "time" not in header and "time/base" in results_table(rows, timed=True).splitlines()[0]


def test_alive_activations_see_what_the_graph_keeps(chain):
    model, x = chain
    x.requires_grad_(True)
    with AliveActivations(model) as alive:
        y = model(x)
    assert alive.bytes(exclude=[x, y]) == (2 * N - 1) * UNIT  # Linear and GELU outputs, but the last
    with AliveActivations(model) as alive:
        y = checkpoint(model, x, use_reentrant=False)
    assert alive.bytes(exclude=[x, y]) == 0
    y.sum().backward()  # recomputed outputs are not recorded
    assert alive.bytes(exclude=[x, y]) == 0


def test_strategies_are_functions_not_names(chain):
    with pytest.raises(TypeError, match="forward function"):
        compare_strategies(*chain, {"none": "none"}, repeat=0)


def test_rebuilt_segments_are_measured(chain):
    model, x = chain
    runs = {
        "none": forward_plain,
        "every block": forward_every_block,
        "sqrt(N)": lambda b, x: forward_segments(b, x, segments_sqrt(N)),
        "sequential": lambda b, x: forward_sequential(b, x, k=2),
        "selective": forward_selective,
    }
    segs = {r.name: r.segments for r in compare_strategies(model, x, runs, repeat=0)}
    full = lambda plan: [(s, e) for s, e, m in plan if m == "full"]  # noqa: E731
    assert segs == {
        "none": [],
        "every block": [(i, i + 1) for i in range(N)],
        "sqrt(N)": full(segments_sqrt(N)),
        "sequential": full(segments_checkpoint_sequential(N, 2)),  # the last chunk is not rebuilt
        "selective": [(i, i + 1) for i in range(N)],
    }


def test_measured_kept_bytes_match_the_model():
    # MLP block: keeps its input and its Linear output (act = 2 x input bytes)
    b, w, n = 4, 16, 9
    model, x = mlp(width=w, depth=n), torch.randn(b, w)
    unit = b * w * 4
    act, inp, cost = [2 * unit] * n, [unit] * n, [1] * n
    for segs in (segments_sqrt(n), plan_for_budget(act, inp, cost, 10 * unit).segments):
        with SavedTensorMeter(model) as m:
            forward_segments(model, x, segs).sum()
        assert m.total_bytes == evaluate(segs, act, inp, cost).kept


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_every_strategy_gives_the_plain_gradients(kind):
    if kind == "mlp":
        model, x = mlp(width=16, depth=6), torch.randn(4, 16, requires_grad=True)
    else:
        model, x = transformer_chain(n_blocks=2, d_model=16, n_heads=2), torch.randn(2, 5, 16)
    n = len(model)
    plan = plan_for_budget([2.0] * n, [1.0] * n, [1.0] * n, min_peak([2.0] * n, [1.0] * n))
    runs = {
        "every block": forward_every_block,
        "sequential": forward_sequential,
        "sqrt(N)": lambda b, x: forward_segments(b, x, segments_sqrt(n)),
        "plan": lambda b, x: forward_segments(b, x, plan.segments),
        "selective": forward_selective,
        "selective mm only": lambda b, x: forward_selective(b, x, selective_policy([torch.ops.aten.mm.default])),
    }
    rows = compare_strategies(model, x, {"none": forward_plain} | runs, repeat=0)
    assert all(r.grad_diff <= 1e-5 for r in rows), {r.name: r.grad_diff for r in rows}


def test_module_policy_rejects_unknown_names():
    model = mlp(width=8, depth=2)
    with pytest.raises(ValueError, match="not modules"):
        module_policy(model, {"nope"})
    with module_policy(model, {"0.linear"}) as pol:
        x = torch.randn(2, 8)
        with SavedTensorMeter(model) as m:
            forward_selective([model], x, pol).sum()  # both blocks in one selective region
    # region input + the cached output of block 0's Linear
    assert m.total_bytes == 2 * 2 * 8 * 4


def test_interleaved_min_times_each_step_in_rounds():
    order = []
    slow = lambda: (order.append("slow"), time.sleep(0.004))  # noqa: E731
    fast = lambda: order.append("fast")  # noqa: E731
    t_slow, t_fast = interleaved_min([slow, fast], warmup=1, repeat=2)
    assert order == ["slow", "fast"] * 3  # one warm-up round, two timed rounds, never one step twice in a row
    assert t_slow >= 0.004 > t_fast
    assert all(math.isnan(t) for t in interleaved_min([fast], warmup=0, repeat=0))
