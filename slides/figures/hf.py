"""Lab 4 figures: one tiny classification job through the Trainer and through an Accelerate loop."""

from __future__ import annotations

import plotly.graph_objects as go

from figures import figure

_CACHE: dict = {}


def _job() -> dict:
    from lab_utils.env import pick

    return dict(n_train=pick(student=128, smoke=64), n_val=32, batch_size=8, grad_accum=4, epochs=1)


def _pair() -> tuple[dict, dict]:
    if "pair" not in _CACHE:
        from lab_utils import hf

        hf.offline()
        _CACHE["pair"] = hf.run_trainer(**_job()), hf.run_accelerate(**_job())
    return _CACHE["pair"]


@figure("hf.loss_match")
def loss_match() -> go.Figure:
    """The same micro-batch losses from the Trainer and from the Accelerate loop."""
    from lab_utils.plots.hf import loss_match as plot

    return plot(*_pair())


@figure("hf.sync_timeline")
def sync_timeline() -> go.Figure:
    """What Accelerate does on each micro-batch of rank 0 of 2 real processes."""
    from lab_utils import hf, launch
    from lab_utils.plots.hf import sync_timeline as plot

    return plot(launch(hf.run_accelerate, 2, kwargs={**_job(), "expected_processes": 2}, timeout=300)[0])


@figure("hf.lr_schedules")
def lr_schedules() -> go.Figure:
    """A linear schedule stepped on every micro-batch: prepared or not, sized in updates or not."""
    from lab_utils import hf_mechanics as mech
    from lab_utils.plots.hf import lr_schedules as plot

    return plot(
        {
            "prepared, total = updates": mech.scheduler_lrs(micro_batches=16, grad_accum=4, prepared=True),
            "not prepared, total = updates": mech.scheduler_lrs(micro_batches=16, grad_accum=4, prepared=False),
            "prepared, total = micro-batches": mech.scheduler_lrs(
                micro_batches=16, grad_accum=4, prepared=True, total_steps=16
            ),
        }
    )
