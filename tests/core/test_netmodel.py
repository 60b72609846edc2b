"""The alpha-beta link model against hand-computed values."""

import math

import pytest

from lab_utils.comm import CommEvent
from lab_utils.netmodel import LINKS, Link, allreduce_seconds, collective_seconds, comm_seconds


def test_ring_allreduce_by_hand():
    link = Link("test", latency_s=1e-3, bandwidth_Bps=1e6)
    # p = 4, n = 1 MB: 2*3 latencies + 2*3/4 * 1 s
    assert allreduce_seconds(1e6, 4, link) == pytest.approx(6e-3 + 1.5)
    assert allreduce_seconds(1e6, 1, link) == 0.0


def test_tree_allreduce_by_hand():
    link = Link("test", latency_s=1e-3, bandwidth_Bps=1e6)
    assert allreduce_seconds(1e6, 8, link, "tree") == pytest.approx(2 * 3 * (1e-3 + 1.0))


def test_bandwidth_term_is_almost_independent_of_ranks():
    link = LINKS["10GbE"]
    big = 1e9
    t2, t64 = allreduce_seconds(big, 2, link), allreduce_seconds(big, 64, link)
    assert 1.0 < t64 / t2 < 2.05  # 2(p-1)/p goes from 1 to ~2


def test_many_small_messages_cost_more_than_one_big_one():
    link = LINKS["1GbE"]
    assert 100 * allreduce_seconds(1e4, 4, link) > allreduce_seconds(1e6, 4, link)


def test_links_are_ordered_fast_to_slow():
    speeds = [LINKS[n].bandwidth_Bps for n in ("NVLink", "InfiniBand", "100GbE", "10GbE", "1GbE", "WAN")]
    assert speeds == sorted(speeds, reverse=True)
    assert Link.from_gbit("x", 8, 1).bandwidth_Bps == 1e9


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="bandwidth_Bps"):
        Link("bad", 0.0, 0.0)
    with pytest.raises(ValueError, match="latency_s"):
        Link("bad", -1.0, 1.0)
    with pytest.raises(ValueError, match="world_size"):
        allreduce_seconds(1, 0, LINKS["1GbE"])
    with pytest.raises(ValueError, match="algorithm"):
        allreduce_seconds(1, 2, LINKS["1GbE"], "butterfly")
    with pytest.raises(ValueError, match="no cost model"):
        collective_seconds("gossip", 1, 2, LINKS["1GbE"])


def test_comm_seconds_groups_by_step():
    link = Link("t", 0.0, 100.0)
    ev = [
        CommEvent(op="all_reduce", nbytes=100, step=0),
        CommEvent(op="all_reduce", nbytes=100, step=0),
        CommEvent(op="broadcast", nbytes=100, step=2),
    ]
    assert comm_seconds(ev, link, 2) == pytest.approx([2.0, 0.0, 1.0])
    assert math.isclose(collective_seconds("all_gather", 200, 2, link), 1.0)
    # FSDP2 calls the *_single collectives: priced as their tensor versions
    pairs = (("all_gather_single", "all_gather_into_tensor"), ("reduce_scatter_single", "reduce_scatter_tensor"))
    for single, tensor in pairs:
        assert collective_seconds(single, 200, 4, link) == collective_seconds(tensor, 200, 4, link) > 0
