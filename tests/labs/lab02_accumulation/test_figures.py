"""The lab's figures draw the numbers they are given."""

import pytest

from lab_utils.labs.lab02_accumulation import figures


def test_token_weight_and_gap_show_the_measured_values():
    fig = figures.token_weight([10, 30])  # K=2, 40 tokens: weights 40/(2*10) = 2 and 40/(2*30) = 2/3
    assert list(fig.data[0].y) == pytest.approx([2.0, 2 / 3]) and list(fig.data[1].y) == [1.0, 1.0]
    with pytest.raises(ValueError, match="token_weight"):
        figures.token_weight([3, 0])
    fig = figures.gap({"ok": 1e-17, "bug": 0.1, "zero": 0.0})
    assert list(fig.data[0].marker.color) == ["#2a9d8f", "#e76f51", "#2a9d8f"]
    assert fig.data[0].x[2] == 1e-18  # an exact zero drawn at the floor of the log axis


def test_memory_speed_and_learning_rates():
    fig = figures.memory_speed([1, 2, 4], [2**20, 2**21, 2**22], [50.0, 80.0, 95.0])
    assert list(fig.data[0].y) == [1.0, 2.0, 4.0] and list(fig.data[1].y) == [50.0, 80.0, 95.0]
    fig = figures.learning_rates({"a": [0.1, 0.05], "b": [0.1, 0.0]})
    assert [list(t.y) for t in fig.data] == [[0.1, 0.05], [0.1, 0.0]]


def test_loss_curves_cut_a_diverging_run_and_gaps_show_every_seed():
    fig = figures.loss_curves({"ok": [2.0, 1.0, 0.5], "diverges": [2.0, 30.0, float("nan")]})
    assert list(fig.data[0].y) == [2.0, 1.0, 0.5] and list(fig.data[1].y) == [2.0, None, None]
    with pytest.raises(ValueError, match="loss_curves"):
        figures.loss_curves({"empty": []})
    fig = figures.generalisation_gaps({"a": [0.1, 0.3], "b": [0.2]})
    assert list(fig.data[0].y) == pytest.approx([0.2, 0.2]) and list(fig.data[1].y) == [0.1, 0.3, 0.2]
    assert list(fig.data[1].x) == ["a", "a", "b"]
