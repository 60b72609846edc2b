"""traffic: FSDP2's collectives as counted on real ranks, ring bytes and simulated time by hand."""

from __future__ import annotations

import pytest

from lab_utils.simnet import LINKS, collective_seconds
from lab_utils.topics.fsdp import traffic
from tests.topics.fsdp.conftest import DEPTH, PARAM_BYTES, K


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fsdp2_collectives_counted(runs):
    ops = runs[0]["per_op"]
    # every micro-step gathers each block for forward and again for backward; one reduce-scatter round
    assert ops["all_gather_single"] == {"count": 2 * K * DEPTH, "bytes": 2 * K * PARAM_BYTES}
    assert ops["reduce_scatter_single"] == {"count": DEPTH, "bytes": PARAM_BYTES // 2}


def test_per_op_and_ring_bytes_by_hand():
    events = [
        {"op": "all_reduce", "nbytes": 1000, "step": 0},
        {"op": "all_gather_single", "nbytes": 1000, "step": 0},
        {"op": "reduce_scatter_single", "nbytes": 250, "step": 1},
    ]
    assert traffic.per_op(events) == {
        "all_reduce": {"count": 1, "bytes": 1000},
        "all_gather_single": {"count": 1, "bytes": 1000},
        "reduce_scatter_single": {"count": 1, "bytes": 250},
    }
    # 4 ranks: all-reduce 2 * 3/4 * 1000; all-gather 3/4 * 1000; reduce-scatter of 250-byte chunks 3 * 250
    assert traffic.sent_per_rank(events[:1], world_size=4) == 1500
    assert traffic.sent_per_rank(events[1:], world_size=4) == 750 + 750  # = one all-reduce
    with pytest.raises(ValueError, match="op='broadcast'"):
        traffic.sent_per_rank([{"op": "broadcast", "nbytes": 1, "step": 0}], world_size=2)


def test_simulated_seconds_use_simnet_under_its_names():
    link = LINKS["1GbE"]
    events = [
        {"op": "all_gather_single", "nbytes": 4000, "step": 0},
        {"op": "reduce_scatter_single", "nbytes": 2000, "step": 1},
    ]
    secs = traffic.simulated_seconds(events, link, world_size=2)
    assert secs == [
        pytest.approx(collective_seconds("all_gather_into_tensor", 4000, 2, link)),
        pytest.approx(collective_seconds("reduce_scatter_tensor", 2000, 2, link)),
    ]
    assert secs[0] == pytest.approx(link.latency_s + 2000 / link.bandwidth_Bps)
