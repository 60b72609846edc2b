"""traffic: FSDP2's collectives as counted on real ranks, ring bytes and modelled time by hand."""

from __future__ import annotations

import pytest

from lab_utils.comm import CommEvent
from lab_utils.labs.lab07_fsdp import traffic
from lab_utils.netmodel import LINKS, Link, collective_seconds, comm_seconds
from tests.labs.lab07_fsdp.sizes import DEPTH, PARAM_BYTES, K


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_fsdp2_collectives_counted(runs):
    ops = runs[0]["per_op"]
    # every micro-step gathers each block for forward and again for backward; one reduce-scatter round
    assert ops["all_gather_single"] == {"count": 2 * K * DEPTH, "bytes": 2 * K * PARAM_BYTES}
    assert ops["reduce_scatter_single"] == {"count": DEPTH, "bytes": PARAM_BYTES // 2}


def test_per_op_and_ring_bytes_by_hand():
    events = [
        CommEvent(op="all_reduce", nbytes=1000, step=0),
        CommEvent(op="all_gather_single", nbytes=1000, step=0),
        CommEvent(op="reduce_scatter_single", nbytes=250, step=1),
    ]
    assert traffic.per_op(events) == {
        "all_reduce": {"count": 1, "bytes": 1000},
        "all_gather_single": {"count": 1, "bytes": 1000},
        "reduce_scatter_single": {"count": 1, "bytes": 250},
    }
    # 4 ranks: all-reduce 2 * 3/4 * 1000; all-gather 3/4 * 1000; reduce-scatter of 250-byte chunks 3 * 250
    assert traffic.sent_per_rank(events[:1], world_size=4) == 1500
    assert traffic.sent_per_rank(events[1:], world_size=4) == 750 + 750  # = one all-reduce
    # a broadcast along a chain: every rank but the last forwards it, 3/4 of 1000 on average
    assert traffic.sent_per_rank([CommEvent(op="broadcast", nbytes=1000, step=0)], world_size=4) == 750
    with pytest.raises(ValueError, match="op='gossip'"):
        traffic.sent_per_rank([CommEvent(op="gossip", nbytes=1, step=0)], world_size=2)


def test_netmodel_prices_fsdp2s_single_collectives_under_their_names():
    link = LINKS["1GbE"]
    events = [
        CommEvent(op="all_gather_single", nbytes=4000, step=0),
        CommEvent(op="reduce_scatter_single", nbytes=2000, step=1),
    ]
    secs = comm_seconds(events, link, world_size=2)
    assert secs == [
        pytest.approx(collective_seconds("all_gather_into_tensor", 4000, 2, link)),
        pytest.approx(collective_seconds("reduce_scatter_tensor", 2000, 2, link)),
    ]
    assert secs[0] == pytest.approx(link.latency_s + 2000 / link.bandwidth_Bps)


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_counted_order_is_what_micro_step_buckets_assumes(runs):
    """Per micro-step FSDP2 first gathers every block for the forward, then (backward) gathers and
    reduce-scatters; the last micro-step (sync on) reduce-scatters each block once."""
    by_step: dict[int, list[str]] = {}
    for e in runs[0]["events"]:
        by_step.setdefault(e.step, []).append(e.op)
    steps = [ops for _, ops in sorted(by_step.items())]
    assert len(steps) == K
    for i, ops in enumerate(steps):
        assert ops[:DEPTH] == ["all_gather_single"] * DEPTH
        assert ops[DEPTH:].count("all_gather_single") == DEPTH
        assert ops.count("reduce_scatter_single") == (DEPTH if i == K - 1 else 0)


def _micro(step, rs=True):
    ag = CommEvent(op="all_gather_single", nbytes=1000, step=step)
    rsc = [CommEvent(op="reduce_scatter_single", nbytes=500, step=step)] if rs else []
    return [ag, ag, ag, *rsc, ag, *rsc]  # depth 2: forward, then backward


def test_micro_step_buckets_prefetch_gathers_and_ready_scatters_after_each_block():
    buckets = traffic.micro_step_buckets(_micro(0), depth=2, forward_s=2.0, backward_s=4.0)
    assert [b.op for b in buckets] == ["all_gather_single"] * 3 + ["reduce_scatter_single"] + [
        "all_gather_single",
        "reduce_scatter_single",
    ]
    # forward blocks 1 s each, backward 2 s each: gathers one block ahead, scatters at each block's end
    assert [b.ready_s for b in buckets] == pytest.approx([0.0, 0.0, 2.0, 4.0, 2.0, 6.0])
    with pytest.raises(ValueError, match="op='all_reduce'"):
        traffic.micro_step_buckets([CommEvent(op="all_reduce", nbytes=1, step=0)], depth=1, forward_s=1, backward_s=1)


def test_update_seconds_hides_what_it_can_and_bounds_the_serial_sum():
    link = Link("test", latency_s=0.0, bandwidth_Bps=1e6)
    rs = collective_seconds("reduce_scatter_tensor", 500, 2, link)  # 0.5 ms
    ag = collective_seconds("all_gather_into_tensor", 1000, 2, link)
    events = [e for s in range(3) for e in _micro(s)]
    got = traffic.update_seconds(events, k=3, depth=2, forward_s=2.0, backward_s=4.0, link=link, world_size=2)
    # a fast link: every collective hides behind compute but the last block's reduce-scatter
    assert got["overlapped"] == pytest.approx(3 * (6.0 + rs))
    assert got["serial"] == pytest.approx(3 * (6.0 + 4 * ag + 2 * rs))
    quiet = [e for s in range(2) for e in _micro(s, rs=False)] + _micro(2)
    fewer = traffic.update_seconds(quiet, k=3, depth=2, forward_s=2.0, backward_s=4.0, link=link, world_size=2)
    assert fewer["overlapped"] == pytest.approx(18.0 + rs)  # sync on the last micro-step only
    slow = Link("slow", latency_s=0.0, bandwidth_Bps=100.0)  # 5 s per gather: the link sets the pace
    got = traffic.update_seconds(events, k=3, depth=2, forward_s=2.0, backward_s=4.0, link=slow, world_size=2)
    assert 3 * 6.0 < got["overlapped"] < got["serial"]
    with pytest.raises(ValueError, match="k=4"):
        traffic.update_seconds(events, k=4, depth=2, forward_s=2.0, backward_s=4.0, link=link, world_size=2)
