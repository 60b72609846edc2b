"""traffic: the P2P counter on real ranks (see conftest), and the modelled link times."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab06_pipeline import timeline, traffic
from lab_utils.netmodel import Link, allreduce_seconds
from tests.labs.lab06_pipeline.schedules import ideal_gpipe


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_counts_send_isend_and_batched_ops_once_each(ranks):
    c0, c1 = (r["counted"] for r in ranks)
    assert c0["sent"] == 40 + 40 + 12 and c0["to"] == {1: 92} and c0["received"] == 0
    assert c1["received"] == 92 and c1["sent"] == 0
    assert c0["restored"] and c1["restored"]


def test_pipeline_step_waits_for_each_message_on_the_link():
    link = Link("test", latency_s=0.0, bandwidth_Bps=1.0)  # a message of n bytes takes n seconds
    one = ideal_gpipe(2, 1)  # F 1 s, B 2 s: 3 s of work per stage
    assert traffic.pipeline_step_seconds(one, 0.0, link) == pytest.approx(6.0)  # free messages: the ideal
    # the activation and the gradient each take 0.5 s: the step is 1 s longer
    assert traffic.pipeline_step_seconds(one, 0.5, link) == pytest.approx(7.0)


def test_pipeline_messages_queue_on_the_senders_link():
    link = Link("test", latency_s=0.0, bandwidth_Bps=1.0)
    # stage 0's 4 forwards end at 1, 2, 3, 4 s; 2 s messages leave one after another: arrive 3, 5, 7, 9
    replayed = timeline.replay(ideal_gpipe(2, 4), link=link, message_bytes=2.0)
    starts = [e.start for e in replayed[1] if e.kind == "F"]
    assert starts == pytest.approx([3.0, 5.0, 7.0, 9.0])  # not 3, 4, 5, 6: one link, one message at a time


def test_ddp_step_hides_all_but_the_last_bucket():
    link = Link("test", latency_s=0.0, bandwidth_Bps=1e6)
    work = ideal_gpipe(2, 2)  # forwards 4 s and backwards 8 s in all: 2 s + 4 s per DDP rank
    last = allreduce_seconds(1e5, 2, link)
    assert traffic.ddp_step_seconds(work, [1e5], link, 2) == pytest.approx(6.0 + last)
    # two buckets: the first is all-reduced while the backward goes on, only the last is exposed
    assert traffic.ddp_step_seconds(work, [1e5, 1e5], link, 2) == pytest.approx(6.0 + last)
    slow = Link("slow", latency_s=0.0, bandwidth_Bps=1e4)  # 10 s per bucket: they queue
    assert traffic.ddp_step_seconds(work, [1e5, 1e5], slow, 2) == pytest.approx(2.0 + 2.0 + 2 * 10.0)
