"""stamps: a real update's stamps add up to its wall clock; the sweep's stamps from the real ranks,
and the overlap model on stamps with round numbers."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import stamps
from lab_utils.labs.lab03_ddp.stamps import MicroStamps
from lab_utils.netmodel import Bucket, Link, MicroStep
from tests.labs.lab03_ddp.sizes import BY_HAND, K

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_every_micro_step_and_bucket_is_stamped_in_order(runs):
    naive, no_sync = runs[0]["stamps"]
    assert [len(m.allreduces) for m in naive.micros] == [len(BY_HAND)] * K
    assert [len(m.allreduces) for m in no_sync.micros] == [0] * (K - 1) + [len(BY_HAND)]
    assert [m.nbytes for m in naive.micros] == [BY_HAND] * K
    assert [m.nbytes for m in no_sync.micros] == [[]] * (K - 1) + [BY_HAND]
    for u in (naive, no_sync):
        starts = [m.forward0 for m in u.micros] + [u.optimizer[0]]
        assert u.begin <= starts[0] and u.optimizer[0] <= u.optimizer[1] <= u.end
        for m, nxt in zip(u.micros, starts[1:]):
            assert m.forward0 <= m.backward0 <= m.compute_end <= nxt
            assert all(m.backward0 <= s <= e <= nxt for s, e in m.allreduces)  # DDP waits for each one


def test_terms_add_up_to_the_wall_clock(runs):
    for u in runs[0]["stamps"]:
        t = u.terms()
        assert t["forward_s"] + t["backward_s"] + t["wait_s"] + t["optimizer_s"] + t["other_s"] == pytest.approx(
            t["wall_s"], abs=1e-12
        )
        assert min(t.values()) >= 0 and t["comm_wait_s"] <= t["wait_s"]


def test_the_sweep_stamps_every_synchronised_micro_step(runs):
    for r in runs:
        measured = r["sweep"]
        assert measured.ks == [1, 3] and measured.world_size == 2 and measured.backend == "gloo"
        assert len(measured.loopback) == 2 * 3  # repeats x max(ks), the warm-up left out
        assert 0 < measured.optimizer_step_s
        for s in measured.loopback:  # rebuilt buckets, ready in backward order, within the backward
            assert [n for _, n in s.buckets] == BY_HAND
            ready = [r for r, _ in s.buckets]
            assert ready == sorted(ready) and 0 <= ready[0] and ready[-1] <= s.backward_s + 1e-3
            assert s.forward_s > 0 and s.backward_s > 0
        micro = stamps.micro_step(measured)
        assert [b.nbytes for b in micro.buckets] == BY_HAND and micro.buckets[-1].ready_s <= micro.backward_s


def test_model_from_stamps_by_hand():
    link = Link("test", latency_s=0.0, bandwidth_Bps=1e6)  # 2 ranks: a ring all-reduce of n bytes = n us
    synced = MicroStamps(0.1, 1.0, [(0.2, 100_000), (1.0, 100_000)])
    late = MicroStamps(0.3, 2.0, [(0.8, 100_000), (2.0, 100_000)])
    measured = stamps.Sweep([1, 2], [synced, synced, late], 0.05, 2, "gloo")
    micro = stamps.micro_step(measured)  # the medians: forward, backward, each bucket's share of it
    assert micro == MicroStep(0.1, 1.0, [Bucket(0.2, 100_000), Bucket(1.0, 100_000)])
    sim = stamps.update_seconds(measured, link)
    # the first bucket hides behind the backward, the last costs 0.1 s after it
    assert sim["k"] == [1, 2] and sim["compute"] == pytest.approx([1.15, 2.25])
    assert sim["naive"] == pytest.approx([1.2 + 0.05, 2 * 1.2 + 0.05])
    assert sim["no_sync"] == pytest.approx([1.25, 1.1 + 1.2 + 0.05])


def test_bad_input():
    with pytest.raises(ValueError, match="repeats=0"):
        stamps.measure(repeats=0)
    with pytest.raises(ValueError, match="ks="):
        stamps.measure(ks=(0, 2))
