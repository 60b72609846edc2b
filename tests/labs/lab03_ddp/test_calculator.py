"""calculator: the overlap model for a described job, on numbers that add up by hand."""

from __future__ import annotations

import math

import pytest

from lab_utils.labs.lab03_ddp import calculator
from lab_utils.netmodel import Link

LINK = Link("test", latency_s=0.0, bandwidth_Bps=1e9)  # 1 GB/s, no latency


def test_per_update_by_hand():
    # 50 MiB of float32 gradients -> two 25 MiB buckets, ready at half and at the end of a 0.2 s backward
    params = 50 * 2**20 / 4
    micro = calculator.even_micro_step(params, 0.3)
    assert [b.nbytes for b in micro.buckets] == [25 * 2**20] * 2 and micro.backward_s == pytest.approx(0.2)
    got = calculator.per_update(params, 2, LINK, 0.3, 4)
    one = 25 * 2**20 / 1e9  # a 2-rank ring all-reduce moves n bytes per rank
    assert got.round_s == pytest.approx(2 * one) and got.exposed_s == pytest.approx(one)
    assert got.naive_s == pytest.approx(4 * (0.3 + one))
    assert got.no_sync_s == pytest.approx(4 * 0.3 + one)
    assert got.saving == pytest.approx(3 * one / (4 * (0.3 + one)))


def test_break_even():
    job = dict(params=50 * 2**20 / 4, world_size=2, micro_step_s=0.3, k=4)
    gbit = calculator.break_even_gbit(latency_s=0.0, **job)
    assert calculator.per_update(link=Link.from_gbit("x", gbit, 0), **job).saving == pytest.approx(0.05, abs=1e-6)
    assert calculator.per_update(link=Link.from_gbit("x", gbit / 2, 0), **job).saving > 0.05
    assert calculator.break_even_gbit(latency_s=1.0, **job) == math.inf  # latency alone costs over 5 %
    assert calculator.break_even_gbit(latency_s=0.0, **{**job, "k": 1}) == 0.0


def test_widget_and_errors():
    box = calculator.widget(link="1GbE")
    report = box.children[-1]
    assert "2/3 of a micro-step" in box.children[-2].value and "1 MiB" in box.children[-2].value  # assumptions shown
    before = report.value
    box.children[1].children[1].value = 1  # K = 1: no_sync has nothing to skip
    assert report.value != before and "saving 0.0 %" in report.value
    with pytest.raises(ValueError, match="link='Wifi'"):
        calculator.widget(link="Wifi")
    with pytest.raises(ValueError, match="backward_share"):
        calculator.even_micro_step(1e6, 0.1, backward_share=0)
