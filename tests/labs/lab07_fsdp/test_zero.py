"""The lab's paper_step (the ZeRO paper's stage-1/2 step, a cell of lab 7) on 2 real ranks (one launch,
see conftest)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lab_utils.flat import flat
from lab_utils.labs.lab07_fsdp import workload
from tests.labs.lab07_fsdp.sizes import DEPTH, PARAM_BYTES, WIDTH, K

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def test_paper_step_is_one_adamw_step_on_the_mean_gradient(runs):
    x, y = workload.dataset(2 * K * 2, WIDTH)
    net = workload.model(WIDTH, DEPTH)
    F.mse_loss(net(x), y).backward()  # equal halves: the mean of the ranks' means
    torch.optim.AdamW(net.parameters(), lr=1e-2).step()
    for r in runs:
        assert (r["paper"]["params"] - flat(net)).abs().max() <= 1e-12


def test_paper_step_moves_one_all_reduce_worth_of_bytes(runs):
    assert runs[0]["paper"]["per_op"] == {
        "reduce_scatter_single": {"count": 1, "bytes": PARAM_BYTES // 2},
        "all_gather_single": {"count": 1, "bytes": PARAM_BYTES},
    }
