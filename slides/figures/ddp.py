"""Lab 3 figures: DDP's all-reduces with and without no_sync, counted on real ranks."""

from __future__ import annotations

import plotly.graph_objects as go

from figures import figure, slider_over


@figure("ddp.comm")
def comm() -> go.Figure:
    """The three accumulation loops on 2 real ranks; all-reduces and bytes per update."""
    from lab_utils import launch
    from lab_utils.ddp import compare_modes
    from lab_utils.plots.ddp import comm_figure

    res = launch(compare_modes, 2, kwargs={"k": 4, "return_params": False})
    return comm_figure(res[0]["modes"])


@figure("ddp.flags")
def flags() -> go.Figure:
    """What DDP's reducer flag and hooks do around no_sync(), observed on rank 0."""
    from lab_utils import launch
    from lab_utils.ddp import reducer_probe
    from lab_utils.plots.ddp import flag_table

    return flag_table(launch(reducer_probe, 2)[0])


@figure("ddp.links")
def links() -> go.Figure:
    """Time per update against K: measured compute plus simulated communication, one slider
    step per network link (the lab's link explorer, as a plotly slider)."""
    from lab_utils import launch
    from lab_utils.ddp import simulated_update_seconds, time_sweep
    from lab_utils.env import pick
    from lab_utils.plots.ddp import time_figure
    from lab_utils.simnet import LINKS

    sweep = launch(time_sweep, 2, kwargs={"ks": (1, 2, 4, 8), "updates": pick(student=3, smoke=2)})[0]
    figs = {name: time_figure(simulated_update_seconds(sweep, link), name) for name, link in LINKS.items()}
    return slider_over(figs, label="link")
