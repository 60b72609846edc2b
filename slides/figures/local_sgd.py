"""Lab 5 figures: local SGD against DDP on real ranks, communication counted."""

from __future__ import annotations

import plotly.graph_objects as go

from figures import figure, slider_over

HS = (1, 4, 16)


def _runs() -> dict:
    from lab_utils import launch
    from lab_utils.env import pick
    from lab_utils.local_sgd import sweep

    if "runs" not in _CACHE:
        _CACHE["runs"] = launch(sweep, 2, kwargs=dict(Hs=list(HS), steps=pick(student=128, smoke=64)))[0]
    return _CACHE["runs"]


_CACHE: dict = {}


@figure("local_sgd.loss")
def loss() -> go.Figure:
    from lab_utils.plots.local_sgd import loss_curves

    return loss_curves(_runs(), ["DDP"] + [f"H={h}" for h in HS])


@figure("local_sgd.bytes")
def comm() -> go.Figure:
    from lab_utils.plots.local_sgd import comm_bytes

    return comm_bytes(_runs(), ["DDP"] + [f"H={h}" for h in HS])


@figure("local_sgd.spread")
def spread() -> go.Figure:
    from lab_utils.plots.local_sgd import rank_spread

    return rank_spread(_runs()[f"H={HS[1]}"])


@figure("local_sgd.time")
def time_on_links() -> go.Figure:
    """Loss against time, compute measured and communication simulated, a slider over links."""
    from lab_utils.local_sgd import compute_per_step
    from lab_utils.plots.local_sgd import loss_vs_time
    from lab_utils.simnet import LINKS

    runs = _runs()
    step_s = compute_per_step(runs)
    names = ["DDP"] + [f"H={h}" for h in HS]
    return slider_over({n: loss_vs_time(runs, link, 2, step_s, names) for n, link in LINKS.items()}, label="link")
