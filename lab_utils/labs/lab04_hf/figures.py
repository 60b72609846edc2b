"""Lab 4's figures: runs' losses, each micro-batch of a multi-process run, learning-rate schedules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab_utils.plots import lines, palette, style

__all__ = ["loss_match", "sync_timeline", "lr_schedules"]


def loss_match(runs: Mapping[str, Sequence[float]], *, grad_accum: int = 1, title: str = "") -> go.Figure:
    """Two (or more) loss histories on one axis, the later ones dotted; with ``grad_accum`` > 1
    (micro-batch losses) every other accumulation window is shaded."""
    fig = go.Figure()
    for i, (name, ys) in enumerate(runs.items()):
        fig.add_trace(
            go.Scatter(
                x=list(range(len(ys))),
                y=list(ys),
                mode="lines+markers",
                name=name,
                line=dict(color=palette(i), dash="solid" if i == 0 else "dot"),
                marker=dict(size=7 if i == 0 else 4),
            )
        )
    if grad_accum > 1:
        n = max(len(ys) for ys in runs.values())
        for start in range(0, n, 2 * grad_accum):
            fig.add_vrect(x0=start - 0.5, x1=start + grad_accum - 0.5, fillcolor="#eeeeee", line_width=0, layer="below")
    return style(
        fig,
        title=title or "Losses: Trainer vs Accelerate loop",
        xaxis="update" if grad_accum == 1 else "micro-batch",
        yaxis="loss",
    )


def sync_timeline(run: Mapping[str, Any]) -> go.Figure:
    """Per micro-batch of one rank: collectives, whether the gradients synced, and the inner
    optimizer's and scheduler's step counts (they move only on sync steps)."""
    n = len(run["sync"])
    x = list(range(n))
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=[
            "collectives (gradient all-reduce)",
            "optimizer.step() that really ran (cumulative)",
            "scheduler position (cumulative)",
        ],
    )
    colors = [palette(2) if s else palette(7) for s in run["sync"]]
    fig.add_trace(
        go.Bar(x=x, y=run["collectives"], marker_color=colors, name="collectives", showlegend=False), row=1, col=1
    )
    for row, key in ((2, "optimizer_steps"), (3, "scheduler_steps")):
        line = dict(color=palette(row - 2))
        trace = go.Scatter(
            x=x, y=run[key], mode="lines+markers", line_shape="hv", name=key.replace("_", " "), line=line
        )
        fig.add_trace(trace, row=row, col=1)
    style(
        fig,
        title=f"What Accelerate does on each micro-batch (rank {run.get('rank', 0)} of "
        f"{run.get('num_processes', 1)}; green = sync step)",
        height=560,
    )
    fig.update_xaxes(title_text="micro-batch", row=3, col=1)
    fig.update_layout(showlegend=False)
    return fig


def lr_schedules(series: Mapping[str, Sequence[float]]) -> go.Figure:
    """Learning rate after each micro-batch, one line per way of stepping the scheduler."""
    fig = lines(
        series,
        title="The same linear schedule, stepped three ways",
        xaxis="micro-batch",
        yaxis="learning rate",
    )
    fig.update_traces(line_shape="hv", mode="lines+markers")
    return fig
