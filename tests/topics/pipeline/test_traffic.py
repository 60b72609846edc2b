"""traffic: the P2P counter on real ranks (see conftest), and the simulated link times."""

from __future__ import annotations

import pytest

from lab_utils.simnet import LINKS
from lab_utils.topics.pipeline import traffic

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def test_counts_send_isend_and_batched_ops_once_each(ranks):
    c0, c1 = (r["counted"] for r in ranks)
    assert c0["sent"] == 40 + 40 + 12 and c0["to"] == {1: 92} and c0["received"] == 0
    assert c1["received"] == 92 and c1["sent"] == 0
    assert c0["restored"] and c1["restored"]


def test_simulated_seconds():
    link = LINKS["1GbE"]
    msgs = [
        traffic.Message("send", 1, 10**6),
        traffic.Message("recv", 0, 10**6),
        {"op": "send", "peer": 1, "nbytes": 0},
    ]
    one = link.latency_s + 10**6 / link.bandwidth_Bps
    assert traffic.send_seconds(msgs, link) == pytest.approx(one + link.latency_s)
    assert traffic.ddp_seconds(10**6, 2, link) == pytest.approx(2 * link.latency_s + 10**6 / link.bandwidth_Bps)
