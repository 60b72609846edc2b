"""Lab 8's figures: a step's parts measured against predicted; the plan per strategy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from lab_utils.memory.stepmem import Anatomy
from lab_utils.plan.report import figure as plan  # predicted peak parts and seconds per update, per plan
from lab_utils.plots import anatomy_bars, style

__all__ = ["parts", "fit", "plan"]


def parts(columns: Mapping[str, Anatomy], *, title: str = "") -> go.Figure:
    """Stacked bars in MiB, one per column, each stacking a step's five parts."""
    mib = {name: {k: v / 2**20 for k, v in a.parts().items()} for name, a in columns.items()}
    return anatomy_bars(mib, title=title, digits=2)


def fit(peaks: Mapping[bool, Sequence[tuple[int, float]]], budget: float, *, title: str = "") -> go.Figure:
    """Predicted peak (bytes) against accumulation K, one line without and one with
    checkpointing, and the budget as a dashed line."""
    fig = go.Figure()
    for ckpt, points in peaks.items():
        fig.add_trace(
            go.Scatter(
                x=[k for k, _ in points],
                y=[b / 2**20 for _, b in points],
                mode="lines+markers",
                name="checkpointing every layer" if ckpt else "no checkpointing",
            )
        )
    fig.add_hline(y=budget / 2**20, line_dash="dash", annotation_text="budget")
    fig.update_xaxes(type="log", tickvals=sorted({k for pts in peaks.values() for k, _ in pts}))
    return style(fig, title=title, xaxis="micro-batches per update K", yaxis="predicted peak (MiB)")
