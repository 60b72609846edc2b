"""stages: the split, its errors, the shape check, and the one-process references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lab_utils.flat import flat
from lab_utils.labs.lab06_pipeline import stages

SPEC = stages.Spec(depth=6, width=8, batch=12, dtype=torch.float64)


def test_split_even_and_by_boundaries():
    net = stages.model(SPEC)
    assert [len(s) for s in stages.split(net, 4)] == [2, 2, 1, 1]
    parts = stages.split(net, 2, boundaries=[1])
    assert [len(s) for s in parts] == [1, 5]
    assert parts[1][0] is net[1]  # the same modules, not copies
    assert stages.stage_sizes(7, 3) == [3, 2, 2]


@pytest.mark.parametrize(
    ("n", "boundaries", "says"),
    [
        (7, None, "n_stages <= 6"),
        (0, None, "positive"),
        (3, [4, 2], "increasing"),
        (2, [0], "increasing"),
        (2, [1, 3], "give 1"),
    ],
)
def test_split_refuses_with_what_to_change(n, boundaries, says):
    with pytest.raises(ValueError, match=says):
        stages.split(stages.model(SPEC), n, boundaries)


def test_check_shapes_names_the_stages():
    good = stages.split(stages.model(SPEC), 3)
    assert stages.check_shapes(good, torch.zeros(4, 8, dtype=torch.float64)) == [(4, 8)] * 3
    bad = nn.Sequential(nn.Linear(8, 16), nn.Linear(12, 8), nn.Linear(8, 8))
    with pytest.raises(ValueError, match="stage 1 cannot take the \\(4, 16\\) tensor that stage 0"):
        stages.check_shapes(stages.split(bad, 3), torch.zeros(4, 8))


def test_micro_batches_cut_the_batch_into_separate_tensors():
    xs, ys = stages.micro_batches(SPEC, 3)
    x, y = stages.batch(SPEC)
    assert torch.equal(torch.cat(xs), x) and torch.equal(torch.cat(ys), y)
    with pytest.raises(ValueError, match="m=5 does not divide batch=12"):
        stages.micro_batches(SPEC, 5)


def test_reference_is_the_accumulated_gradient():
    net = stages.model(SPEC)
    xs, ys = stages.micro_batches(SPEC, 4)
    for x, y in zip(xs, ys):
        (F.mse_loss(net(x), y) / 4).backward()
    assert (flat(net, grads=True) - stages.reference_grads(SPEC)).abs().max() < 1e-12
    # without the 1/m the gradient is m times too large: the reference tells them apart
    assert (4 * flat(net, grads=True) - stages.reference_grads(SPEC)).abs().max() > 1e-3


def test_uneven_model_keeps_the_boundary_shape():
    spec = stages.Spec(width=8, batch=4, hidden=(16, 64, 16))
    net = stages.model(spec)
    assert len(net) == 3
    assert stages.check_shapes(stages.split(net, 3), stages.batch(spec)[0]) == [(4, 8)] * 3


def test_piece_flops_count_the_missing_input_gradient_of_stage_0():
    # a micro-batch of 3 rows through Linear(8, 8): 2 x 3 x 8 x 8 = 384 FLOPs forward; backward the
    # weight's gradient (384) and, except on stage 0 whose input is the data, the input's (384)
    one = 2 * 3 * 8 * 8
    assert stages.piece_flops(stages.Spec(depth=2, width=8, batch=12), 2, 4) == [(one, one), (one, 2 * one)]
    assert stages.piece_flops(stages.Spec(depth=4, width=8, batch=12), 2, 4) == [(2 * one, 3 * one), (2 * one, 4 * one)]
