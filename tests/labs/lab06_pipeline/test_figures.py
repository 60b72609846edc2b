"""figures: each builds from the data the lab gives it, with what it claims to show."""

from __future__ import annotations

from lab_utils.labs.lab06_pipeline import figures
from lab_utils.labs.lab06_pipeline.records import Event
from lab_utils.labs.lab06_pipeline.timeline import formula


def _events():
    return [
        [Event(0, "F", 0, 0.0, 0.001), Event(0, "B", 0, 0.003, 0.005)],
        [Event(1, "F", 0, 0.001, 0.002), Event(1, "B", 0, 0.002, 0.003)],
    ]


def test_timeline_has_a_bar_per_piece_of_work_in_ms():
    fig = figures.timeline(_events())
    assert len(fig.data) == 4
    assert sorted(tr.text for tr in fig.data) == ["B0", "B0", "F0", "F0"]
    b0 = next(tr for tr in fig.data if tr.text == "B0" and tr.y[0] == "stage 0")
    assert b0.base[0] == 3.0 and abs(b0.x[0] - 2.0) < 1e-9
    assert "/" == b0.marker.pattern.shape


def test_timelines_stack_one_row_per_run():
    fig = figures.timelines({"a": _events(), "b": _events()})
    assert len(fig.data) == 8 and [a.text for a in fig.layout.annotations] == ["a", "b"]


def test_bubble_draws_the_formula_and_the_points():
    rows = [{"p": 2, "m": m, "measured": 0.3} for m in (1, 4)]
    fig = figures.bubble(rows)
    line, points = fig.data
    assert list(line.y) == [formula(2, m) for m in range(1, 5)]
    assert list(points.x) == [1, 4]
    line, replayed, points = figures.bubble([{**r, "replay": 0.25} for r in rows]).data
    assert list(replayed.y) == [0.25, 0.25] and "free messages" in replayed.name and list(points.y) == [0.3, 0.3]


def test_memory_and_traffic():
    fig = figures.memory({"GPipe": [4 * 2**20, 2**20], "1F1B": [2**20, 2**20]})
    assert [tr.name for tr in fig.data] == ["GPipe", "1F1B"] and fig.data[0].y[0] == 4.0
    fig = figures.traffic({"1GbE": {"pipeline": 0.5, "DDP": 0.25}})
    assert [tr.name for tr in fig.data] == ["pipeline", "DDP"] and fig.data[1].y[0] == 250.0
    assert "modelled" in fig.layout.title.text


def test_work_draws_measured_replay_their_blocked_parts_and_the_formula():
    rows = [
        {"piece_ms": 1.0, "measured": 0.9, "blocked": 0.8, "replay": 0.3, "replay_blocked": 0.2},
        {"piece_ms": 10.0, "measured": 0.3, "blocked": 0.2, "replay": 0.21, "replay_blocked": 0.14},
    ]
    measured, blocked, replayed, replay_blocked, line = figures.work(rows, 0.2).data
    assert list(measured.y) == [0.9, 0.3] and list(blocked.y) == [0.8, 0.2] and list(line.y) == [0.2, 0.2]
    assert list(replayed.y) == [0.3, 0.21] and list(replay_blocked.y) == [0.2, 0.14]
    assert list(measured.x) == [1.0, 10.0]
    *_, flops, line = figures.work([{**r, "flops": 0.25} for r in rows], 0.2).data
    assert list(flops.y) == [0.25, 0.25] and "FLOPs" in flops.name
