"""Runners against plain autograd: bytes kept as the cost model says, gradients unchanged."""

import pytest
import torch

from lab_utils.memory import SavedTensorMeter
from lab_utils.models import mlp, transformer_chain
from lab_utils.topics.checkpointing.planner import evaluate, min_peak, plan_for_budget
from lab_utils.topics.checkpointing.policies import module_policy, selective_policy
from lab_utils.topics.checkpointing.runners import run_chain
from lab_utils.topics.checkpointing.schedules import STRATEGIES, segments_sqrt


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
    for name, (segs, pol) in runs.items():
        got = grads(model, lambda s=segs, p=pol: run_chain(model, x, s, policy=p, k=2).pow(2).mean())
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
