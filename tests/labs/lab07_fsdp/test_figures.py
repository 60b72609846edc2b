"""figures: each draws the numbers it is given (a measured dict in, the same values on screen)."""

from __future__ import annotations

from lab_utils.labs.lab07_fsdp import figures

P = 1024 * 1024


def _held(world):
    b = {"params": P // world, "grads": P // world, "optimizer": 2 * P // world}
    return [{"DDP": {"bytes": {"params": P, "grads": P, "optimizer": 2 * P}}, "FSDP2": {"bytes": b}}]


def test_holdings_stacks_measured_bytes_and_marks_formulas():
    fig = figures.holdings({2: _held(2), 4: _held(4)}, P)
    bars = {t.name: list(t.y) for t in fig.data if t.type == "bar"}
    assert bars["params (measured)"] == [1.0, 0.5, 1.0, 0.25]
    zero3 = next(t for t in fig.data if t.name == "ZeRO-3 formula")
    assert list(zero3.y) == [2.0, 2.0, 1.0, 1.0]  # (1 + 1 + 2) / W MiB


def test_traffic_accumulation_links_checkpointing():
    fig = figures.traffic({"DDP": {"all_reduce": {"count": 1, "bytes": P}}}, P)
    assert list(fig.data[0].y) == [1.0]
    fig = figures.accumulation({"a": [0, P, P // 2]}, {"a": P, "b": P // 4})
    assert list(fig.data[0].y) == [0, 1.0, 0.5] and list(fig.data[1].y) == [1.0, 0.25]
    fig = figures.links({"1GbE": {"a": 0.5, "b": 0.1}})
    assert [list(t.y) for t in fig.data] == [[0.5], [0.1]] and "modelled" in fig.layout.title.text
    assert list(figures.checkpointing({"plain": P, "ckpt": P // 4}).data[0].y) == [1.0, 0.25]
