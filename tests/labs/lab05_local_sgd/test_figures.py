"""The lab's figures build from the data record.gather and run_accelerate return."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab_utils.comm import CommEvent
from lab_utils.labs.lab05_local_sgd import figures
from lab_utils.labs.lab05_local_sgd.accelerate_runs import Averaging
from lab_utils.netmodel import LINKS
from tests.labs.lab05_local_sgd.fake import fake_accelerate, fake_run


def local_run(steps=8, H=4, bytes_=1000):
    events = [
        CommEvent(op="all_reduce", nbytes=bytes_, step=s, source="torch.distributed") for s in range(H - 1, steps, H)
    ]
    return fake_run(
        steps=steps,
        events=events,
        synced_steps=list(range(H - 1, steps, H)),
        drift=[0.1 * (s % H + 1) if (s + 1) % H else 0.0 for s in range(steps)],
        eval_curve=[(s, 2.0 / s) for s in range(2, steps + 1, 2)],
        comm={"bytes": len(events) * bytes_},
    )


RUNS = {"DDP": local_run(H=1), "H=1": local_run(H=1), "H=4": local_run(H=4)}


def test_spread_marks_the_averagings():
    fig = figures.spread(RUNS["H=4"])
    assert list(fig.data[1].x) == [3, 7] and list(fig.data[1].y) == [0.0, 0.0]
    with pytest.raises(ValueError, match="spread=True"):
        figures.spread(replace(RUNS["H=4"], drift=[]))


def test_loss_traffic_and_time_figures():
    assert len(figures.loss(RUNS, ["DDP", "H=4"]).data) == 2
    assert figures.loss(RUNS, ["DDP"], title="x").layout.title.text == "measured: x"
    assert list(figures.traffic(RUNS, ["DDP", "H=4"]).data[0].y) == [8000, 2000]
    fig = figures.wallclock(RUNS, LINKS["WAN"], 2, 1e-3, ["DDP", "H=4"])
    assert "modelled" in fig.layout.title.text and len(fig.data) == 2


def test_schedule_colours_averagings_by_window():
    r = fake_accelerate(
        micro_batches=4,
        sync_flags=[False, True, False, True],
        averagings=[
            Averaging(micro_batch=2, on_update_boundary=False),
            Averaging(micro_batch=4, on_update_boundary=True),
        ],
    )
    fig = figures.schedule({"run": r})
    by_name = {t.name: list(t.x) for t in fig.data}
    assert by_name["optimizer update"] == [1, 3]
    assert by_name["averaging inside a window"] == [2]
    assert by_name["averaging after an update"] == [4]
