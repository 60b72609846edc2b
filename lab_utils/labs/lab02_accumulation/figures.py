"""Lab 2's figures: measured numbers in, a plotly figure out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab_utils.plots import style

__all__ = ["gap", "token_weight", "learning_rates", "loss_curves", "generalisation_gaps", "memory_speed"]

_OK, _BAD = "#2a9d8f", "#e76f51"


def gap(gaps: Mapping[str, float]) -> go.Figure:
    """Horizontal log-scale bars of each loop's largest parameter difference from the large batch:
    green under the tolerance (dotted), red above; exact zeros drawn at 1e-18."""
    names, tolerance = list(gaps), 1e-12
    vals = [max(float(gaps[n]), 1e-18) for n in names]
    colors = [_OK if gaps[n] <= tolerance else _BAD for n in names]
    fig = go.Figure(
        go.Bar(
            x=vals,
            y=names,
            orientation="h",
            marker_color=colors,
            text=[f"{gaps[n]:.1e}" for n in names],
            textposition="outside",
            hovertemplate="%{y}: %{x:.2e}<extra></extra>",
        )
    )
    title = "Distance to one large batch after training"
    style(fig, title=title, xaxis="max |parameter difference| (log)", height=120 + 38 * len(names))
    fig.add_vline(x=tolerance, line_dash="dot", annotation_text=f"tolerance {tolerance:g}")
    fig.update_xaxes(type="log")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(margin=dict(l=10, r=60), showlegend=False)
    return fig


def token_weight(tokens_per_micro_batch: Sequence[int]) -> go.Figure:
    """For micro-batches holding N_i labelled tokens (one window, K = their number): a token's
    weight under mean-of-means, 1 / (K N_i), divided by its weight in one large batch, 1 / sum N.
    Bars above 1: tokens of short micro-batches count too much; the fix puts every bar at 1."""
    n = list(tokens_per_micro_batch)
    if not n or min(n) < 1:
        raise ValueError(f"token_weight({n}): need at least one micro-batch, each with >= 1 token")
    k, total = len(n), sum(n)
    rel = [total / (k * ni) for ni in n]
    labels = [f"micro-batch {i} ({ni} tokens)" for i, ni in enumerate(n)]
    fig = go.Figure(
        [
            go.Bar(name="mean of means (loss / K)", x=labels, y=rel, marker_color=_BAD),
            go.Bar(name="token sum / window tokens", x=labels, y=[1.0] * k, marker_color=_OK),
        ]
    )
    title = "How much one token counts, relative to one large batch"
    style(fig, title=title, yaxis="weight per token / large-batch weight")
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(barmode="group")
    return fig


def _lines(series: Mapping[str, Sequence[float | None]]) -> list[go.Scatter]:
    # later runs drawn thinner and dashed, so a run that coincides with another stays visible
    dashes, widths = ("solid", "dash", "dot", "dashdot"), (6, 4, 2, 2)
    return [
        go.Scatter(
            x=list(range(len(v))),
            y=list(v),
            mode="lines+markers",
            name=name,
            line=dict(dash=dashes[i % 4], width=widths[i % 4]),
        )
        for i, (name, v) in enumerate(series.items())
    ]


def learning_rates(lrs: Mapping[str, Sequence[float]]) -> go.Figure:
    """One line per run: the learning rate each update used."""
    title = "Learning rate at each optimizer update"
    return style(go.Figure(_lines(lrs)), title=title, xaxis="optimizer update", yaxis="learning rate")


def loss_curves(
    curves: Mapping[str, Sequence[float]],
    *,
    title: str = "Loss after each optimizer update",
    yaxis: str = "loss",
    log_y: bool = True,
) -> go.Figure:
    """One line per run, against the optimizer update. A run that diverges is cut where its loss
    stops being finite or exceeds 10x the largest starting loss (the axis stops there)."""
    if not curves or any(len(v) == 0 for v in curves.values()):
        raise ValueError("loss_curves(): every run needs at least one loss")
    cap = 10 * max(abs(float(v[0])) for v in curves.values())
    cut = {name: [float(y) if math.isfinite(y) and abs(y) <= cap else None for y in v] for name, v in curves.items()}
    fig = style(go.Figure(_lines(cut)), title=title, xaxis="optimizer update", yaxis=yaxis)
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def generalisation_gaps(gaps: Mapping[str, Sequence[float]]) -> go.Figure:
    """One column of points per setting (one point per seed) and a bar at their mean."""
    names = list(gaps)
    means = [sum(gaps[n]) / len(gaps[n]) for n in names]
    fig = go.Figure(go.Bar(x=names, y=means, name="mean", marker_color="#bbbbbb", opacity=0.6))
    fig.add_trace(
        go.Scatter(
            x=[n for n in names for _ in gaps[n]],
            y=[float(v) for n in names for v in gaps[n]],
            mode="markers",
            name="one seed",
            marker=dict(color=_BAD, size=10),
        )
    )
    title = "Train accuracy minus validation accuracy, one point per seed"
    return style(fig, title=title, yaxis="train acc. - validation acc.")


def memory_speed(
    micro_batch_sizes: Sequence[int],
    peak_bytes: Sequence[float],
    samples_per_s: Sequence[float],
    *,
    effective_batch: int | None = None,
    device: str = "cpu",
    memory_label: str = "peak activation memory (MiB)",
) -> go.Figure:
    """Two panels against the micro-batch size (log2 axis) at a fixed effective batch: the peak
    memory of one micro-batch's forward/backward, and training throughput."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=(f"measured: {memory_label}", f"measured: samples/s on {device}")
    )
    x = list(micro_batch_sizes)
    fig.add_trace(
        go.Scatter(x=x, y=[b / 2**20 for b in peak_bytes], mode="lines+markers", name="memory", marker_color=_OK), 1, 1
    )
    fig.add_trace(
        go.Scatter(x=x, y=list(samples_per_s), mode="lines+markers", name="throughput", marker_color=_BAD), 1, 2
    )
    suffix = f" (effective batch {effective_batch})" if effective_batch else ""
    style(fig, title="Memory and throughput against the micro-batch size, measured" + suffix)
    fig.update_xaxes(type="log", dtick=0.30103, title_text="micro-batch size (log)")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(showlegend=False)
    return fig
