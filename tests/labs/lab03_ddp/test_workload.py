"""workload: the counting harness on 2 real ranks; every loop against one large batch."""

from __future__ import annotations

import pytest
import torch

from lab_utils.flat import flat
from lab_utils.labs.lab03_ddp import workload
from tests.labs.lab03_ddp.sizes import PARAM_BYTES, SMALL, K

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_counts_per_update_match_the_loop(runs):
    loops = runs[0]["loops"]
    assert loops["naive"].collectives_per_update == [K, K]  # one bucket, K synced backwards
    assert loops["no_sync"].collectives_per_update == [1, 1]
    assert loops["forward_outside"].collectives_per_update == [K, K]  # the mistake still syncs
    assert loops["no_sync"].bytes_per_update == [PARAM_BYTES] * 2
    assert loops["naive"].bytes_per_update == [K * PARAM_BYTES] * 2


def test_all_loops_equal_one_large_batch(runs):
    ref = workload.large_batch_reference(k=K, world_size=2, updates=2, setup=SMALL)
    start = flat(workload.model(SMALL), dtype=torch.float64)
    assert (ref - start).abs().max() > 1e-3  # training moved the weights
    for rank in (0, 1):
        for name, res in runs[rank]["loops"].items():
            assert (res.params - ref).abs().max() < 1e-6, (rank, name)
    m0, m1 = runs[0]["loops"], runs[1]["loops"]
    # Same arithmetic: naive and forward_outside are bit-identical, and every rank holds the same model.
    assert m0["naive"].fingerprint == m0["forward_outside"].fingerprint
    assert all(m0[n].fingerprint == m1[n].fingerprint for n in m0)


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="widht"):
        workload.Setup(widht=3)
    with pytest.raises(TypeError, match="setup must be a workload.Setup"):
        workload.model({"width": 3})
    with pytest.raises(TypeError, match="update must be a function"):
        workload.train("no_sync")
    with pytest.raises(ValueError, match="k=0"):
        workload.train(print, 0)
