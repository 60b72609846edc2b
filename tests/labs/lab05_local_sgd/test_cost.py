"""Time on another network: measured compute plus the counted collectives costed on a link model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab_utils.comm import CommEvent
from lab_utils.labs.lab05_local_sgd import cost, task
from lab_utils.netmodel import LINKS, allreduce_seconds
from tests.labs.lab05_local_sgd.fake import fake_run

PBYTES = 11_082 * 4
TENSOR_BYTES = [2048 * 4, 64 * 4, 4160 * 4 - 64 * 4, 64 * 4, 4160 * 4 - 64 * 4, 64 * 4, 640 * 4, 10 * 4]


def local_run(steps=16, H=4, exit_step=None):
    """A run as record.run returns it: one all_reduce per parameter tensor every H steps."""
    at = list(range(H - 1, steps, H)) + ([exit_step] if exit_step is not None else [])
    events = [
        CommEvent(op="all_reduce", nbytes=n, step=s, source="torch.distributed") for s in at for n in TENSOR_BYTES
    ]
    return fake_run(steps=steps, events=events, step_s=[1e-3] * steps)


def test_tensor_sizes_are_the_lab_model():
    # the hand-computed sizes below must be the lab model's, or the by-hand costs test another model
    assert TENSOR_BYTES == [p.numel() * p.element_size() for p in task.make_model().parameters()]


def test_elapsed_seconds_by_hand():
    r, link = local_run(), LINKS["1GbE"]
    t = cost.elapsed_seconds(r, link, 2, step_seconds=1e-3)
    # one ring all-reduce per tensor: 2 (p-1) latencies + 2 (p-1)/p bytes / bandwidth each, p = 2
    per_avg = 8 * 2 * link.latency_s + PBYTES / link.bandwidth_Bps
    assert per_avg == pytest.approx(sum(allreduce_seconds(n, 2, link) for n in TENSOR_BYTES))
    assert t[2] == pytest.approx(3e-3)
    assert t[3] == pytest.approx(4e-3 + per_avg)
    assert t[-1] == pytest.approx(16e-3 + 4 * per_avg)


def test_averaging_at_exit_is_added_to_the_end():
    link = LINKS["WAN"]
    with_exit = cost.elapsed_seconds(local_run(steps=10, H=4, exit_step=10), link, 2, 1e-3)
    without = cost.elapsed_seconds(local_run(steps=10, H=4), link, 2, 1e-3)
    assert with_exit[:-1] == without[:-1]
    assert with_exit[-1] - without[-1] == pytest.approx(sum(allreduce_seconds(n, 2, link) for n in TENSOR_BYTES))


def test_compute_per_step_is_the_median():
    runs = {"a": fake_run(step_s=[1.0, 2.0, 9.0]), "b": fake_run(step_s=[3.0, 100.0])}
    assert cost.compute_per_step(runs) == 3.0
    with pytest.raises(ValueError, match="step_s"):
        cost.compute_per_step({"a": fake_run(step_s=[])})


def test_ddp_all_reduce_hides_behind_the_backward_averaging_does_not():
    link, p, compute = LINKS["10GbE"], 2, 3e-3
    ar = allreduce_seconds(PBYTES, p, link)
    hooked = [CommEvent(op="all_reduce", nbytes=PBYTES, step=0, source="ddp-hook")]
    averaged = [CommEvent(op="all_reduce", nbytes=PBYTES, step=0, source="torch.distributed")]
    # one bucket holding every gradient is ready only when the backward ends: nothing to hide behind
    assert cost.step_time(hooked, link, p, compute) == pytest.approx(compute + ar)
    two = [replace(hooked[0], nbytes=PBYTES // 2), replace(hooked[0], nbytes=PBYTES // 2)]
    half_hidden = cost.step_time(two, link, p, compute)  # the first half goes out mid-backward
    assert compute + allreduce_seconds(PBYTES / 2, p, link) <= half_hidden + 1e-12
    assert half_hidden < compute + 2 * allreduce_seconds(PBYTES / 2, p, link)
    assert cost.step_time(averaged * 2, link, p, compute) == pytest.approx(compute + 2 * ar)


def test_barrier_costs_latency_on_its_group():
    link = LINKS["WAN"]
    barrier = CommEvent(op="barrier", nbytes=0, step=0, source="torch.distributed", group_size=4)
    assert cost.step_time([barrier], link, 2, 0.0) == pytest.approx(2 * 3 * link.latency_s)
    sub = CommEvent(op="all_reduce", nbytes=PBYTES, step=0, source="torch.distributed", group_size=2)
    assert cost.step_time([sub], link, 4, 0.0) == pytest.approx(allreduce_seconds(PBYTES, 2, link))
    with pytest.raises(ValueError, match="backward_share"):
        cost.step_time([], link, 2, 1.0, backward_share=0)


def test_links_by_group_size():
    fast, slow = LINKS["NVLink"], LINKS["1GbE"]
    grad = CommEvent(op="all_reduce", nbytes=PBYTES, step=0, source="torch.distributed", group_size=2)
    avg = replace(grad, group_size=4)
    t = cost.step_time([replace(grad, in_backward=True), avg], {2: fast, 4: slow}, 4, 1e-3)
    assert t == pytest.approx(1e-3 + allreduce_seconds(PBYTES, 2, fast) + allreduce_seconds(PBYTES, 4, slow))
    with pytest.raises(ValueError, match="groups of 4"):
        cost.step_time([avg], {2: fast}, 4, 1e-3)
