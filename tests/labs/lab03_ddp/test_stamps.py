"""stamps and breakdown: one real update's time split into terms that add up, on 2 real ranks;
the model's terms add up to the model's update."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import breakdown
from lab_utils.netmodel import Bucket, Contention, Link, MicroStep, naive_update_seconds, no_sync_update_seconds
from tests.labs.lab03_ddp.conftest import BY_HAND, K

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_every_micro_step_and_bucket_is_stamped_in_order(runs):
    naive, no_sync = runs[0]["stamps"]
    assert [len(m.allreduces) for m in naive.micros] == [len(BY_HAND)] * K
    assert [len(m.allreduces) for m in no_sync.micros] == [0] * (K - 1) + [len(BY_HAND)]
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
    for mine, peer in zip(runs[0]["stamps"], runs[1]["stamps"]):
        terms = breakdown.measured(mine, peer)
        assert terms.total_s == pytest.approx(mine.end - mine.begin, abs=1e-12)
        assert 0 <= terms.peer_s <= terms.wait_s


@pytest.mark.parametrize("loop, fn", [("naive", naive_update_seconds), ("no_sync", no_sync_update_seconds)])
@pytest.mark.parametrize("contention", [None, Contention(0.3, 0.5)])
def test_model_terms_add_up_to_the_model(loop, fn, contention):
    micro = MicroStep(0.010, 0.020, [Bucket(0.008, 2e6), Bucket(0.020, 1e6)])
    link = Link("test", 1e-4, 1e8)
    for k in (1, 3):
        terms = breakdown.modelled(micro, k, loop, link, optimizer_s=0.002, contention=contention)
        assert terms.total_s == pytest.approx(fn(micro, k, link, 2, optimizer_s=0.002, contention=contention))
        assert terms.peer_s == 0 and terms.wait_s > 0
