"""hf.figures: each figure shows the data it is given."""

from __future__ import annotations

from lab_utils.labs.lab04_hf import figures


def test_figures_plot_their_inputs():
    fig = figures.loss_match({"Trainer": [3.0, 2.0, 1.0], "loop": [3.0, 2.0, 1.5]})
    assert [list(t.y) for t in fig.data] == [[3.0, 2.0, 1.0], [3.0, 2.0, 1.5]]
    assert [t.name for t in fig.data] == ["Trainer", "loop"]
    run = {"sync": [False, True], "collectives": [0, 1], "optimizer_steps": [0, 1], "scheduler_steps": [0, 2]}
    fig = figures.sync_timeline(run)
    assert list(fig.data[0].y) == [0, 1] and list(fig.data[2].y) == [0, 2]
    fig = figures.lr_schedules({"a": [1.0, 0.5], "b": [1.0, 0.0]})
    assert [list(t.y) for t in fig.data] == [[1.0, 0.5], [1.0, 0.0]]
