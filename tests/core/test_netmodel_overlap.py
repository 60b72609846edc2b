"""The overlap model: transfers queue on one link behind their ready times."""

import pytest

from lab_utils.netmodel import (
    Bucket,
    Link,
    MicroStep,
    allreduce_seconds,
    backward_then_comm,
    backward_with_comm,
    evenly_ready,
    naive_update_seconds,
    no_sync_update_seconds,
    serial_seconds,
)

LINK = Link("test", latency_s=0.0, bandwidth_Bps=1e6)  # 1 MB/s, no latency: costs easy to read


def test_early_bucket_on_fast_link_is_hidden():
    step = backward_with_comm([Bucket(0.1, 1000)], 1.0, LINK, 2)  # costs 1 ms, ready at 0.1 s
    assert step.end_s == 1.0 and step.exposed_s == 0.0
    assert step.comm_s == pytest.approx(allreduce_seconds(1000, 2, LINK))  # all of it hidden


def test_last_bucket_is_never_hidden():
    cost = allreduce_seconds(1e6, 2, LINK)
    step = backward_with_comm([Bucket(1.0, 1e6)], 1.0, LINK, 2)
    assert step.end_s == pytest.approx(1.0 + cost) and step.exposed_s == pytest.approx(cost)


def test_transfers_queue_behind_each_other():
    cost = allreduce_seconds(1e6, 2, LINK)  # 1 s each
    step = backward_with_comm([Bucket(0.0, 1e6), Bucket(0.0, 1e6), Bucket(0.0, 1e6)], 0.5, LINK, 2)
    assert [t.start_s for t in step.transfers] == pytest.approx([0, cost, 2 * cost])
    assert step.end_s == pytest.approx(3 * cost)


def test_overlap_never_slower_than_the_old_sum_and_equal_when_all_ready_at_the_end():
    buckets = evenly_ready([3e5, 3e5, 4e5], 1.0)
    with_overlap = backward_with_comm(buckets, 1.0, LINK, 4).end_s
    old = backward_then_comm(buckets, 1.0, LINK, 4).end_s
    assert with_overlap < old
    assert old == pytest.approx(1.0 + sum(allreduce_seconds(b.nbytes, 4, LINK) for b in buckets))


def test_no_sync_saves_k_minus_one_exposed_rounds():
    micro = MicroStep(0.2, 0.5, evenly_ready([4e5, 6e5], 0.5))
    exposed = backward_with_comm(micro.buckets, 0.5, LINK, 2).exposed_s
    for k in (1, 2, 4, 8):
        naive = naive_update_seconds(micro, k, LINK, 2, optimizer_s=0.1)
        quiet = no_sync_update_seconds(micro, k, LINK, 2, optimizer_s=0.1)
        assert naive - quiet == pytest.approx((k - 1) * exposed)


def test_more_ranks_cost_more_on_the_ring():
    slow = Link("lat", latency_s=1e-3, bandwidth_Bps=1e9)
    micro = MicroStep(0.0, 0.001, [Bucket(0.001, 1e6)])
    times = [naive_update_seconds(micro, 1, slow, p) for p in (2, 4, 8)]
    assert times == sorted(times) and times[0] < times[-1]
    assert naive_update_seconds(micro, 1, slow, 1) == pytest.approx(0.001)  # one rank: nothing to send


def test_serial_seconds_is_the_sum():
    assert serial_seconds([("all_reduce", 1e6)] * 3, LINK, 2) == pytest.approx(3 * allreduce_seconds(1e6, 2, LINK))


def test_evenly_ready_spreads_by_bytes():
    b = evenly_ready([1, 3], 2.0)
    assert [x.ready_s for x in b] == pytest.approx([0.5, 2.0])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: backward_with_comm([Bucket(2.0, 1)], 1.0, LINK, 2), "after the backward"),
        (lambda: naive_update_seconds(MicroStep(0, 1), 0, LINK, 2), "k=0"),
        (lambda: naive_update_seconds(MicroStep(0, 1), 1, LINK, 0), "world_size=0"),
        (lambda: Bucket(-1.0, 1), "ready_s"),
        (lambda: evenly_ready([], 1.0), "bucket_bytes"),
    ],
)
def test_bad_input_says_what(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_contention_slows_the_compute_and_the_transfer_it_overlaps():
    from lab_utils.netmodel import Contention

    cost = allreduce_seconds(1e6, 2, LINK)  # 1 s on the wire, ready at once, 0.5 s of compute
    free = backward_with_comm([Bucket(0.0, 1e6)], 0.5, LINK, 2)
    assert free.end_s == pytest.approx(cost) and free.backward_s == 0.5
    slow_compute = backward_with_comm([Bucket(0.0, 1e6)], 0.5, LINK, 2, contention=Contention(compute=1.0))
    assert slow_compute.backward_s == pytest.approx(1.0) and slow_compute.end_s == pytest.approx(cost)
    both = backward_with_comm([Bucket(0.0, 1e6)], 0.5, LINK, 2, contention=Contention(compute=1.0, comm=1.0))
    # both at half speed until the compute ends at 1 s (half the transfer done), then the rest alone
    assert both.backward_s == pytest.approx(1.0) and both.end_s == pytest.approx(1.0 + cost / 2)


def test_no_contention_is_the_plain_model_and_a_small_one_is_close():
    from lab_utils.netmodel import Contention

    micro = MicroStep(0.1, 0.3, evenly_ready([4e5, 4e5, 2e5], 0.3))
    plain = naive_update_seconds(micro, 4, LINK, 2, optimizer_s=0.01)
    assert naive_update_seconds(micro, 4, LINK, 2, optimizer_s=0.01, contention=Contention()) == plain
    near = naive_update_seconds(micro, 4, LINK, 2, optimizer_s=0.01, contention=Contention(1e-9, 1e-9))
    assert near == pytest.approx(plain, rel=1e-6)
    fast = Link("fast", 0.0, 1e7)  # transfers hide behind the compute: only the slowed compute shows
    slower = no_sync_update_seconds(micro, 4, fast, 2, contention=Contention(compute=0.3))
    assert slower > no_sync_update_seconds(micro, 4, fast, 2)
    assert no_sync_update_seconds(micro, 4, LINK, 2, contention=Contention(compute=0.3)) == pytest.approx(
        no_sync_update_seconds(micro, 4, LINK, 2)
    )  # on the slow link the wire decides: a slower compute that is still hidden costs nothing
    with pytest.raises(ValueError, match="compute=-0.1"):
        Contention(compute=-0.1)
