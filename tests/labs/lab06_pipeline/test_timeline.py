"""timeline: the recorder on one process (order, saved and live bytes), the bubble, its replay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lab_utils.comm import CommEvent
from lab_utils.labs.lab06_pipeline.records import Event, Run
from lab_utils.labs.lab06_pipeline.timeline import (
    Recorder,
    bubble,
    fill_drain,
    formula,
    formula_split,
    idle_split,
    median_repeat,
    order,
    order_1f1b,
    replay,
    schedule_split,
)
from tests.labs.lab06_pipeline.schedules import Checkpointed, ideal_gpipe


def _stage() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.GELU()).double()


def _run(order_: str, *, as_activation: bool, module: nn.Module | None = None) -> Recorder:
    """Forwards and backwards of 3 micro-batches [4, 8] in the order given ('FFFBBB', 'FBFBFB')."""
    stage = module or _stage()
    xs = [torch.randn(4, 8, dtype=torch.float64).requires_grad_(as_activation) for _ in range(3)]
    outs, nf, nb = {}, 0, 0
    with Recorder(stage, 0) as rec:
        for kind in order_:
            if kind == "F":
                outs[nf] = stage(xs[nf])
                nf += 1
            else:
                outs[nb].sum().backward()
                nb += 1
    return rec


def test_records_the_order_and_what_each_forward_keeps():
    rec = _run("FFFBBB", as_activation=True)
    assert order(rec.events) == ["F0", "F1", "F2", "B0", "B1", "B2"]
    # Linear keeps its input, GELU keeps its input (the Linear's output): 2 x 4 x 8 float64
    assert {e.saved_bytes for e in rec.events if e.kind == "F"} == {2 * 4 * 8 * 8}
    assert all(e.end >= e.start for e in rec.events)
    # the data (no gradient wanted) is not an activation of the stage: only GELU's input counts
    data = _run("FFFBBB", as_activation=False)
    assert {e.saved_bytes for e in data.events if e.kind == "F"} == {4 * 8 * 8}


def test_order_of_a_mixed_schedule():
    assert order(_run("FFBFBB", as_activation=True).events) == ["F0", "F1", "B0", "F2", "B1", "B2"]


def test_checkpointed_stage_keeps_its_input_only():
    rec = _run("FFFBBB", as_activation=True, module=Checkpointed(_stage()))
    assert {e.saved_bytes for e in rec.events if e.kind == "F"} == {4 * 8 * 8}
    assert order(rec.events) == ["F0", "F1", "F2", "B0", "B1", "B2"]


def test_recorder_refuses_a_stage_without_parameters():
    with pytest.raises(ValueError, match="stage 3 has no trainable parameters"):
        Recorder(nn.GELU(), 3)


@pytest.mark.parametrize(("p", "m"), [(2, 1), (2, 4), (3, 3), (4, 8)])
def test_bubble_of_the_ideal_timeline_is_the_formula(p, m):
    assert bubble(ideal_gpipe(p, m)) == pytest.approx(formula(p, m))
    assert bubble(replay(ideal_gpipe(p, m))) == pytest.approx(formula(p, m))


def test_replay_removes_message_delays_and_slots_remove_durations():
    # every message takes 0.5: stage 1 starts 0.5 later, stage 0's backwards 1.0 later
    delay = {(1, "F"): 0.5, (1, "B"): 0.5, (0, "F"): 0.0, (0, "B"): 1.0}
    late = [
        [
            Event(e.stage, e.kind, e.micro_batch, e.start + delay[e.stage, e.kind], e.end + delay[e.stage, e.kind])
            for e in st
        ]
        for st in ideal_gpipe(2, 4)
    ]
    assert bubble(late) > formula(2, 4) + 0.01  # waiting for messages is idle time too
    assert bubble(replay(late)) == pytest.approx(formula(2, 4))
    uneven = [
        [Event(e.stage, e.kind, e.micro_batch, e.start, e.start + (3 if e.stage else 1)) for e in st]
        for st in ideal_gpipe(2, 4)
    ]
    assert bubble(replay(uneven)) > formula(2, 4) + 0.05
    assert bubble(replay(uneven, slots=True)) == pytest.approx(formula(2, 4))


def test_slots_tell_a_pipeline_from_a_loop_that_does_not_overlap():
    # one micro-batch at a time, through both stages and back: no overlap at all
    serial = [[Event(s, k, i, 0, 0) for i in range(4) for k in "FB"] for s in range(2)]
    for st in serial:
        for j, e in enumerate(st):
            st[j] = Event(e.stage, e.kind, e.micro_batch, j, j + 0.5)
    assert bubble(replay(serial, slots=True)) == pytest.approx(0.5)
    assert formula(2, 4) == pytest.approx(0.2)


def test_replay_names_a_deadlock():
    stuck = [[Event(0, "B", 0, 0, 1)], [Event(1, "F", 0, 0, 1), Event(1, "B", 1, 1, 2)]]
    with pytest.raises(ValueError, match="deadlock"):
        replay(stuck)


def test_formula_and_bubble_refuse_nonsense():
    with pytest.raises(ValueError, match="both must be >= 1"):
        formula(0, 3)
    with pytest.raises(ValueError, match="one non-empty list"):
        bubble([[], []])


def test_live_bytes_follow_the_schedule_and_fall_back_to_zero():
    per_mb = 2 * 4 * 8 * 8
    gpipe, one_by_one = _run("FFFBBB", as_activation=True), _run("FBFBFB", as_activation=True)
    assert gpipe.live.peak == 3 * per_mb and one_by_one.live.peak == per_mb
    assert gpipe.live.now == one_by_one.live.now == 0  # autograd freed every saved tensor
    assert [e.live_bytes for e in one_by_one.events] == [per_mb, 0] * 3


def test_live_bytes_see_a_graph_kept_longer_than_its_order_says():
    """An order of one micro-batch at a time, whose graphs are kept: the meter sees all three held."""
    stage = _stage()
    kept = []
    with Recorder(stage, 0) as rec:
        for _ in range(3):
            y = stage(torch.randn(4, 8, dtype=torch.float64, requires_grad=True))
            y.sum().backward(retain_graph=True)  # the saved tensors stay with the graph
            kept.append(y)
    per_mb = 2 * 4 * 8 * 8
    assert order(rec.events) == ["F0", "B0", "F1", "B1", "F2", "B2"] and rec.live.peak == 3 * per_mb
    del kept, y
    assert rec.live.now == 0


def _recorded(events, messages, per_repeat=None) -> Run:
    """A ``runs.measure`` record of one m with only its events and messages filled in."""
    return Run(events, [0] * len(events), messages, torch.zeros(0), 0, 0, messages_per_repeat=per_repeat or [])


def test_idle_split_takes_blocked_time_from_the_stamps():
    # 2 stages, a 4 s step: stage 0 computes 0-1 and 3-4, stage 1 computes 1-3 and waits in recv 0-1
    runs_ = [
        _recorded(
            events=[[Event(0, "F", 0, 0.0, 1.0), Event(0, "B", 0, 3.0, 4.0)]],
            messages=[CommEvent("send", 0, start=1.0, end=2.5), CommEvent("send", 0, start=2.5, end=None)],
        ),
        _recorded(
            events=[[Event(1, "F", 0, 1.0, 2.0), Event(1, "B", 0, 2.0, 3.0)]],
            messages=[CommEvent("send", 0, start=0.0, end=1.0), CommEvent("send", 0, start=0.5, end=0.8)],
        ),
    ]
    idle = idle_split(runs_)
    assert idle.measured == pytest.approx(1 - 4 / 8)
    assert idle.blocked == pytest.approx((1.5 + 1.0) / 8)  # overlapping intervals counted once
    assert idle.between == pytest.approx(idle.measured - idle.blocked)


def test_idle_split_takes_each_repeats_own_stamps():
    # two repeats of the same 2-stage step; stage 1 waits in a receive 0-1 in the first, 0-0.5 in the second
    evs = [
        [Event(0, "F", 0, 0.0, 1.0), Event(0, "B", 0, 3.0, 4.0)],
        [Event(1, "F", 0, 1.0, 2.0), Event(1, "B", 0, 2.0, 3.0)],
    ]
    first, second = [CommEvent("recv", 0, start=0.0, end=1.0)], [CommEvent("recv", 0, start=0.0, end=0.5)]
    runs_ = [_recorded([evs[0]] * 2, [], [[], []]), _recorded([evs[1]] * 2, second, [first, second])]
    assert idle_split(runs_, 0).blocked == pytest.approx(1.0 / 8)
    assert idle_split(runs_, 1).blocked == pytest.approx(0.5 / 8)
    for i in (0, 1):
        idle = idle_split(runs_, i)
        assert idle.blocked + idle.between == pytest.approx(idle.measured)
    # a record with only the last repeat's stamps refuses an earlier repeat rather than mixing steps
    with pytest.raises(ValueError, match="repeat 0 has no stamped messages"):
        idle_split([_recorded([evs[0]] * 2, []), _recorded([evs[1]] * 2, second)], 0)


def test_formula_split_is_the_hand_arithmetic():
    # p = 2, m = 4, t_F = 1, t_B = 2: a step of (4 + 1) x 3 = 15 units on 2 stages (30 stage-units).
    # stage 0: F0-F3 at 0-4, waits 4-7 in the receive of its first gradient (3 units blocked);
    # stage 1: waits 0-1 in its first receive (1 blocked), last backward 11-13, then 13-15 idle
    # after its last send while stage 0 runs B3 (2 units between)
    idle = formula_split(2, 4)
    assert idle.measured == pytest.approx(6 / 30) == pytest.approx(formula(2, 4))
    assert idle.blocked == pytest.approx(4 / 30)
    assert idle.between == pytest.approx(2 / 30)
    # with t_B = t_F the tail is a third of the bubble: blocked 3/20, between 1/20 of p x (5 x 2)
    even = formula_split(2, 4, t_f=1.0, t_b=1.0)
    assert (even.blocked, even.between) == (pytest.approx(3 / 20), pytest.approx(1 / 20))
    with pytest.raises(ValueError, match="durations must be > 0"):
        formula_split(2, 4, t_b=0.0)


@pytest.mark.parametrize(("p", "m", "f", "b"), [(2, 4, 1.0, 2.0), (2, 1, 1.0, 2.0), (3, 3, 1.0, 3.0), (4, 8, 2.0, 1.0)])
def test_schedule_split_of_the_ideal_timeline_is_formula_split(p, m, f, b):
    ideal = ideal_gpipe(p, m, f, b)
    want = formula_split(p, m, t_f=f, t_b=b)
    got = schedule_split(ideal)
    assert got.measured == pytest.approx(want.measured) and got.blocked == pytest.approx(want.blocked)
    assert schedule_split(replay(ideal)).blocked == pytest.approx(want.blocked)


def test_schedule_split_sees_an_imbalance():
    # stage 0's backward half of stage 1's (its first layer computes no input gradient): the
    # free-message replay idles more than the formula, and stage 1's tail shrinks
    uneven = [
        [
            Event(
                e.stage,
                e.kind,
                e.micro_batch,
                e.start,
                e.start + (1 if e.kind == "B" and e.stage == 0 else e.end - e.start),
            )
            for e in st
        ]
        for st in ideal_gpipe(2, 4)
    ]
    got = schedule_split(replay(uneven))
    # by hand: stage 1 F 1-5, B 5-7 ... 11-13; stage 0 F 0-4, B 7-8, 9-10, 11-12, 13-14: span 14
    assert got.measured == pytest.approx(1 - (8 + 12) / 28)
    assert got.between == pytest.approx(1 / 28)  # stage 1 ends at 13, the step at 14


def test_median_repeat_picks_one_step():
    steps = [ideal_gpipe(2, 4), ideal_gpipe(2, 1), ideal_gpipe(2, 8)]  # bubbles 0.2, 0.5, 1/9
    per_rank = [[steps[i][s] for i in range(3)] for s in range(2)]
    assert median_repeat(per_rank) == 0
    assert median_repeat([r[:2] for r in per_rank]) == 0  # of two, the lower middle: 0.2 < 0.5
    with pytest.raises(ValueError, match="same, non-zero number"):
        median_repeat([per_rank[0], per_rank[1][:2]])


def test_order_1f1b():
    assert order_1f1b(2, 0, 4) == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
    assert order_1f1b(2, 1, 4) == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]
    assert order_1f1b(3, 0, 2) == ["F0", "F1", "B0", "B1"]  # m < p: it is a fill-drain


def test_replay_runs_two_stages_per_rank_on_one_clock():
    # 4 stages on 2 ranks (rank r holds stages r and r + 2), one micro-batch, each piece 1 unit:
    # the 4 forwards and 4 backwards form one chain, so the replay takes 8 units whatever the ranks
    per_rank = [[Event(s, k, 0, 0, 1) for k, s in (("F", r), ("F", r + 2), ("B", r + 2), ("B", r))] for r in (0, 1)]
    out = replay(per_rank)
    assert [(e.stage, e.kind, e.start) for e in out[0]] == [(0, "F", 0), (2, "F", 2), (2, "B", 5), (0, "B", 7)]
    assert [(e.stage, e.kind, e.start) for e in out[1]] == [(1, "F", 1), (3, "F", 3), (3, "B", 4), (1, "B", 6)]


def test_fill_drain_with_equal_and_unequal_stages():
    assert bubble(fill_drain([(1.0, 2.0)] * 3, 5)) == pytest.approx(formula(3, 5))
    # stage 0's backward half of stage 1's: by hand (see test_schedule_split_sees_an_imbalance) 8/28
    uneven = fill_drain([(1, 1), (1, 2)], 4)
    assert bubble(uneven) == pytest.approx(8 / 28)
    assert schedule_split(uneven).between == pytest.approx(1 / 28)
    assert order(uneven[0]) == [f"F{i}" for i in range(4)] + [f"B{i}" for i in range(4)]
