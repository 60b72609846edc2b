"""figures: built from the runs' data; the explorer redraws from the measured sweep."""

from __future__ import annotations

import pytest

from lab_utils.labs.lab03_ddp import figures, reducer, stamps
from lab_utils.netmodel import LINKS, Link
from tests.labs.lab03_ddp.sizes import K

pytestmark = pytest.mark.usefixtures("no_orphans")


def test_figures(runs):
    assert [t.y for t in figures.comm(runs[0]["loops"]).data][0] == (K, 1, K)
    assert len(figures.flags(runs[0]["probe"]).data[0].cells.values[0]) == len(reducer.SCENARIOS)
    assert len(figures.buckets(runs[0]["buckets"].per_step).data) == 3
    fig = figures.time_per_update(stamps.update_seconds(runs[0]["sweep"], LINKS["1GbE"]), "1GbE")
    assert "modelled" in fig.layout.title.text and len(fig.data) == 3
    fig = figures.hooks(runs[0]["settings"].hooks)
    assert list(fig.data[0].x) == ["all-reduce (float32)", "fp16_compress_hook", "PowerSGD rank 1"]  # bf16 refused


def test_explorer_redraws_from_the_sweep(runs):
    measured = runs[0]["sweep"]
    box = figures.explorer(measured, preset="1GbE")
    drop, bw, lat = box.children[0].children
    out = box.children[1]

    def shown():
        return out.outputs[0]["data"]["application/vnd.plotly.v1+json"]

    assert "1GbE" in shown()["layout"]["title"]["text"] and "modelled" in shown()["layout"]["title"]["text"]
    bw.value = 100.0  # a slider move makes the link custom
    assert drop.value == "custom"
    want = stamps.update_seconds(measured, Link.from_gbit("x", 100.0, lat.value))
    assert shown()["data"][0]["y"] == pytest.approx(want["naive"])
    assert shown()["data"][1]["y"] == pytest.approx(want["no_sync"])
    drop.value = "WAN"  # a preset moves the sliders
    assert bw.value == pytest.approx(0.1) and lat.value == pytest.approx(20_000)
    assert "WAN" in shown()["layout"]["title"]["text"]
    with pytest.raises(ValueError, match="preset='Wifi'"):
        figures.explorer(measured, preset="Wifi")
