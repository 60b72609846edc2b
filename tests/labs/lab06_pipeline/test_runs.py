"""runs: the harness on 2 real ranks (one launch, see conftest), torch's schedules, DDP's bytes."""

from __future__ import annotations

import pytest
import torch

from lab_utils.labs.lab06_pipeline import stages, timeline
from tests.labs.lab06_pipeline.schedules import SPEC, M

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def _grads(ranks, key, kind=None, m=M):
    return torch.cat([(r[key][kind] if kind else r[key]).runs[m].grads for r in ranks])


def test_hand_written_pipeline_equals_one_large_batch(ranks):
    ref = stages.reference_grads(SPEC)
    for m in (1, M):
        assert (_grads(ranks, "hand", m=m) - ref).abs().max() <= 1e-12


def test_each_stage_records_fill_then_drain(ranks):
    want = [f"F{i}" for i in range(M)] + [f"B{i}" for i in range(M)]
    for r in ranks:
        (events,) = r["hand"].runs[M].events
        assert timeline.order(events) == want
    per_stage = [r["hand"].runs[M].events[0] for r in ranks]
    assert timeline.bubble(timeline.replay(per_stage, slots=True)) == pytest.approx(timeline.formula(2, M))
    assert 0 < timeline.bubble(per_stage) < 1


def test_messages_are_one_micro_batch_each_way(ranks):
    act = SPEC.batch // M * SPEC.width * 8
    for rank, peer in ((0, 1), (1, 0)):
        msgs = ranks[rank]["hand"].runs[M].messages
        assert [m.nbytes for m in msgs if m.op == "send"] == [act] * M
        assert {m.peer for m in msgs} == {peer}


def test_torch_schedules_match_and_order_as_named(ranks):
    hand = _grads(ranks, "hand")
    for kind in ("GPipe", "1F1B"):
        assert (_grads(ranks, "torch", kind) - hand).abs().max() <= 1e-12
    assert timeline.order(ranks[0]["torch"]["GPipe"].runs[M].events[0]) == timeline.order(
        ranks[0]["hand"].runs[M].events[0]
    )
    one_f_one_b = timeline.order(ranks[1]["torch"]["1F1B"].runs[M].events[0])
    assert one_f_one_b == [x for i in range(M) for x in (f"F{i}", f"B{i}")]
    # 1F1B: stage 0 keeps at most 2 micro-batches, GPipe all M
    per_mb = ranks[0]["hand"].runs[M].events[0][0].saved_bytes
    # measured live, while torch's schedules ran
    assert ranks[0]["torch"]["1F1B"].runs[M].live_peak == [2 * per_mb]
    assert ranks[0]["torch"]["GPipe"].runs[M].live_peak == [M * per_mb]


def test_blocking_sends_and_receives_are_stamped_on_the_events_clock(ranks):
    for r in ranks:
        run = r["hand"].runs[M]
        msgs, (events,) = run.messages, run.events
        assert all(m.end is not None and 0 <= m.start <= m.end for m in msgs)
        assert max(m.end for m in msgs) <= max(e.end for e in events) + 1.0
    idle = timeline.idle_split([r["hand"].runs[M] for r in ranks])
    assert 0 < idle.blocked <= idle.measured  # stage 1 waits in its first receive: blocked time is idle time


def test_interleaved_runs_two_stages_per_rank_to_the_same_gradient(ranks):
    by_stage = {i: g for r in ranks for i, g in r["interleaved"].grads.items()}
    assert sorted(by_stage) == [0, 1, 2, 3] and set(ranks[0]["interleaved"].grads) == {0, 2}
    assert (torch.cat([by_stage[i] for i in range(4)]) - _grads(ranks, "hand")).abs().max() <= 1e-12
    (events,) = ranks[1]["interleaved"].events  # one repeat
    assert {e.stage for e in events} == {1, 3} and len(events) == 2 * 2 * M
    assert all(a.start <= b.start for a, b in zip(events, events[1:]))


def test_checkpointed_stages_recompute_and_keep_only_inputs(ranks):
    r0, r1 = (r["ckpt"].runs[M] for r in ranks)
    act = SPEC.batch // M * SPEC.width * 8
    assert {e.saved_bytes for e in r1.events[0] if e.kind == "F"} == {act}
    assert {e.saved_bytes for e in r0.events[0] if e.kind == "F"} == {0}  # the data is not counted
    assert r0.recomputed == r0.forward_calls > 0
    assert (_grads(ranks, "ckpt") - stages.reference_grads(SPEC)).abs().max() <= 1e-12


def test_ddp_bytes_are_the_parameters(ranks):
    ddp = ranks[0]["ddp"]
    assert ddp.bytes == ddp.param_bytes == sum(p.numel() * 8 for p in stages.model(SPEC).parameters())
    assert sum(ddp.buckets) == ddp.bytes and all(b > 0 for b in ddp.buckets)


def test_ddp_bytes_counts_the_rebuilt_buckets(ranks):
    # DDP's first backward runs one bucket of every parameter; from the second, its own buckets
    ddp = ranks[0]["ddp_rebuilt"]
    assert len(ddp.buckets) >= 2 and sum(ddp.buckets) == ddp.bytes == ddp.param_bytes


def test_each_repeat_keeps_its_own_messages_and_step_time(ranks):
    for r in ranks:
        run = r["repeated"].runs[M]
        assert len(run.events) == len(run.messages_per_repeat) == len(run.step_s) == 2
        assert run.messages is run.messages_per_repeat[-1]
        # fill-drain on 2 stages: one send and one receive per micro-batch, in every repeat
        assert all(len(msgs) == 2 * M for msgs in run.messages_per_repeat)
        assert run.messages_per_repeat[0] is not run.messages_per_repeat[1]
        for events, msgs, step in zip(run.events, run.messages_per_repeat, run.step_s):
            assert max(e.end for e in events) <= step and all(0 <= m.start <= m.end <= step for m in msgs)
        assert len(run.plain_s) == 3 and all(t > 0 for t in run.plain_s)
    for i in range(2):
        idle = timeline.idle_split([r["repeated"].runs[M] for r in ranks], i)
        assert 0 < idle.blocked <= idle.measured
        assert idle.blocked + idle.between == pytest.approx(idle.measured)


def test_ping_pong_times_round_trips_on_rank_0(ranks):
    assert len(ranks[0]["ping"]) == 3 and all(t > 0 for t in ranks[0]["ping"])
    assert ranks[1]["ping"] == []
