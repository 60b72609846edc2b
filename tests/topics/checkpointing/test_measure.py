"""Measuring strategies: kept bytes belong to the chain (not the loss), liveness after a forward."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from lab_utils.models import mlp
from lab_utils.topics.checkpointing.measure import AliveActivations, compare_strategies, profile_blocks

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
    rows = compare_strategies(*chain, {"none": "none", "every block": "every block"}, loss_fn=loss_fn, repeat=0)
    kept = {r["name"]: r["kept"] for r in rows}
    assert kept == {"none": (2 * N - 1) * UNIT, "every block": (N - 1) * UNIT}
    assert all(r["grad_diff"] <= 1e-6 for r in rows)
    assert rows[1]["peak_model"] == (N - 1) * UNIT + 2 * UNIT


def test_cpu_peak_is_measured_and_lower_with_checkpointing():
    model, x = mlp(width=64, depth=8, seed=0), torch.randn(256, 64)
    rows = compare_strategies(model, x, {"none": "none", "every block": "every block"}, repeat=0, profile_cpu=True)
    assert all(r["peak"] > 0 for r in rows)
    assert rows[1]["peak"] < rows[0]["peak"]


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
