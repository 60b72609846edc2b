"""timing: a real update's stamps add up to its wall clock; the sweep's stamps from the real ranks,
the emulated link really holds each bucket, and the overlap model on stamps with round numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab_utils.labs.lab03_ddp import timing
from lab_utils.labs.lab03_ddp.timing import LinkHook, MicroStamps
from lab_utils.netmodel import Bucket, Link, MicroStep, collective_seconds, lockstep_update_seconds
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


def test_stamps_and_the_emulated_link(runs):
    measured = runs[0]["sweep"]
    assert measured.loops == ["naive", "no_sync"] and measured.ks == [1, 3]
    for s in measured.loopback:  # rebuilt buckets, ready in backward order, within the backward
        assert [n for _, n in s.buckets] == BY_HAND
        ready = [r for r, _ in s.buckets]
        assert ready == sorted(ready) and 0 <= ready[0] and ready[-1] <= s.backward_s + 1e-3
        assert s.forward_s > 0 and s.backward_s > 0
    (link,) = {run.link for run in measured.emulated}
    round_s = sum(collective_seconds("all_reduce", n, 2, link) for n in BY_HAND)
    slowest = max(sorted(s.backward_s for s in r["sweep"].loopback)[1] for r in runs)  # median of 3
    assert round_s == pytest.approx(20 * slowest)  # rounds=(20,): one round = 20 x the slowest backward
    unblocked = []
    for run in measured.emulated:
        steps = run.micro[0]
        synced = [s for s in steps if s.buckets]
        assert len(steps) == run.k and len(synced) == (run.k if run.loop == "naive" else 1)
        for s in synced:
            assert len(s.transfers) == len(BY_HAND)
            # the hook does not block the backward: its compute ends while the first bucket is still
            # on the wire (a hook that waited for its transfer would hold the backward until that
            # transfer's end, in every step; on the slow link, 20 backwards a round, a non-blocking
            # one ends first unless a burst of load made that backward 20 times slower)
            unblocked.append(s.backward_s < s.transfers[0][1])
            for (start, end), (_, n) in zip(s.transfers, s.buckets):  # held for at least its cost
                assert end - start >= collective_seconds("all_reduce", n, 2, link) - 1e-4
        # the wall clock includes the link: the backward waited for the last transfer
        assert run.wall_s[0] >= sum(s.forward_s + max([s.backward_s] + [e for _, e in s.transfers])
                                    for s in steps)  # fmt: skip
    assert sum(unblocked) > len(unblocked) / 2, unblocked


def test_model_from_stamps_by_hand():
    link = Link("test", latency_s=0.0, bandwidth_Bps=1e6)  # 2 ranks: a ring all-reduce of n bytes = n us
    synced = MicroStamps(0.1, 1.0, [(0.2, 100_000), (1.0, 100_000)])
    quiet = MicroStamps(0.1, 1.0, [])
    measured = timing.Sweep(["no_sync"], [1, 2], [synced] * 3, 0.05, [], 2, "gloo")
    micro = timing.micro_step(measured)
    assert micro == MicroStep(0.1, 1.0, [Bucket(0.2, 100_000), Bucket(1.0, 100_000)])
    sim = timing.update_seconds(measured, link)
    # the first bucket hides behind the backward, the last costs 0.1 s after it
    assert sim["naive"] == pytest.approx([1.2 + 0.05, 2 * 1.2 + 0.05])
    assert sim["no_sync"] == pytest.approx([1.25, 1.1 + 1.2 + 0.05])
    run = timing.Run(link, 2, "no_sync", [2.5], [[quiet, synced]])
    runs = [replace(measured, emulated=[run])] * 2
    (row,) = timing.validation(runs)
    assert row.model_s == pytest.approx(2.35) and row.old_sum_s == pytest.approx(2.45)
    assert row.error == pytest.approx(2.5 / 2.35 - 1) and row.buckets == 2
    assert row.typical_s == pytest.approx(sim["no_sync"][1])  # the typical micro-step's model
    assert row.model_s == lockstep_update_seconds([[MicroStep(0.1, 1.0), micro]] * 2, link, 2, optimizer_s=0.05)[0]


def test_validation_keeps_the_median_repeat():
    link = Link("test", latency_s=0.0, bandwidth_Bps=1e6)
    synced = MicroStamps(0.1, 1.0, [(0.2, 100_000), (1.0, 100_000)])
    measured = timing.Sweep(["naive"], [1], [synced] * 3, 0.0, [], 2, "gloo")
    slow = MicroStamps(0.1, 2.0, [(0.2, 100_000), (2.0, 100_000)])  # a repeat whose compute was slowed
    # the model: 1.2 s for `synced`, 2.2 s for `slow`; the ratios are 1.25, 1.1 (median) and 1.0
    run = timing.Run(link, 1, "naive", [1.5, 2.42, 1.2], [[synced], [slow], [synced]])
    (row,) = timing.validation([replace(measured, emulated=[run])] * 2)
    assert row.measured_s == 2.42 and row.model_s == pytest.approx(2.2) and row.repeats == 3
    assert row.error == pytest.approx(0.1)  # not the fastest repeat's 0 %, nor the first one's 25 %


def test_bad_input():
    with pytest.raises(TypeError, match="loops must map names"):
        timing.measure({"naive": "naive"})
    with pytest.raises(ValueError, match="rounds="):
        timing.measure({"naive": print}, rounds=(0,))
    with pytest.raises(TypeError, match="link must be"):
        LinkHook("1GbE")
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        LinkHook().attach(object())


def test_savings_pair_the_alternating_repeats(runs):
    measured = runs[0]["sweep"]
    rows = timing.savings(measured)
    assert [r.k for r in rows] == [1, 3] and all(r.repeats == 1 for r in rows)
    walls = {(r.k, r.loop): r.wall_s[0] for r in measured.emulated}
    for r in rows:  # one repeat: the pair's difference is the whole statistic
        assert r.median_s == r.min_s == r.max_s == pytest.approx(walls[(r.k, "naive")] - walls[(r.k, "no_sync")])
    assert rows[0].model_s == 0 and rows[1].model_s > 0  # K = 1: the same loop; K = 3: two exposed parts
