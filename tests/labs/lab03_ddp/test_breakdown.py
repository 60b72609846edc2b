"""breakdown: one real update's stamps (``timing.UpdateStamps``, 2 real ranks) split into terms
that add up; the model's terms add up to the model's update."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import breakdown
from lab_utils.netmodel import Bucket, Contention, Link, MicroStep, naive_update_seconds, no_sync_update_seconds

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_measured_terms_add_up_to_the_wall_clock(runs):
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
