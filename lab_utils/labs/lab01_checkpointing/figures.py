"""Figures of the checkpointing lab: the graph with what is kept, the trade-off, plans, memory.

fig = figures.graph(NODES, EDGES, status={"A": "kept", "B": "recomputed"}, notes={"A": "4 KiB"})
fig = figures.tradeoff(points, front=[(peak, flops), ...], plan=plan.segments)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab_utils.plots import anatomy_bars, legend_beside, level, palette, style  # anatomy_bars: shared with lab 8

__all__ = ["graph", "tradeoff", "anatomy_bars", "segment_curves", "memory_timeline"]

# what happened to a node's value between forward and backward
STATUS_COLORS = {
    "kept": "#2ca02c",
    "cached": "#1f77b4",
    "dropped": "#bbbbbb",
    "recomputed": "#ff7f0e",
    "input": "#444444",
    "": "#dddddd",
}

_ARROW = dict(xref="x", yref="y", axref="x", ayref="y", showarrow=True, text="")
_ARROW.update(arrowhead=3, arrowsize=1.2, arrowwidth=1.5, arrowcolor="#888", standoff=22, startstandoff=22)


def graph(
    nodes: Mapping[str, tuple[float, float]],
    edges: Sequence[tuple[str, str]],
    *,
    status: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    title: str = "",
) -> go.Figure:
    """Nodes at fixed (x, y) positions, arrows for edges, each node coloured by its status (a key
    of STATUS_COLORS) and labelled with ``notes`` (e.g. bytes kept)."""
    status, notes = dict(status or {}), dict(notes or {})
    fig = go.Figure()
    for a, b in edges:
        (x0, y0), (x1, y1) = nodes[a], nodes[b]
        fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, **_ARROW)
    for st in dict.fromkeys(status.get(n, "") for n in nodes):
        names = [n for n in nodes if status.get(n, "") == st]
        fig.add_trace(
            go.Scatter(
                x=[nodes[n][0] for n in names],
                y=[nodes[n][1] for n in names],
                mode="markers+text",
                marker=dict(size=44, color=STATUS_COLORS.get(st, "#dddddd"), line=dict(width=2, color="#333")),
                text=[f"<b>{n}</b>" for n in names],
                textfont=dict(color="white", size=15),
                hovertext=[f"{n}: {st or 'not saved'} {notes.get(n, '')}" for n in names],
                hoverinfo="text",
                name=st or "not saved",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[nodes[n][0] for n in names],
                y=[nodes[n][1] - 0.32 for n in names],
                mode="text",
                text=[notes.get(n, "") for n in names],
                showlegend=False,
                hoverinfo="skip",
                textfont=dict(size=12),
            )
        )
    style(fig, title=title, height=360)
    xs, ys = [p[0] for p in nodes.values()], [p[1] for p in nodes.values()]
    fig.update_xaxes(visible=False, range=[min(xs) - 0.6, max(xs) + 0.6])
    fig.update_yaxes(visible=False, range=[min(ys) - 0.7, max(ys) + 0.5])
    return fig


def tradeoff(
    points: Sequence[Mapping],
    *,
    front: Sequence[tuple[float, float]] = (),
    y: str = "extra_flops",
    ylabel: str = "extra forward FLOPs (fraction of one forward)",
    xlabel: str = "activation memory kept (fraction of no checkpointing)",
    title: str = "Memory against recompute",
    plan: Sequence[tuple[int, int, str]] | None = None,
    n_blocks: int | None = None,
) -> go.Figure:
    """Measured strategies as labelled points (``points``: dicts with 'name', 'memory' and ``y``),
    the planner's optimal front as a step line and, with ``plan``, a strip below showing which
    blocks that plan checkpoints."""
    rows = 2 if plan is not None else 1
    fig = make_subplots(rows=rows, cols=1, row_heights=[0.82, 0.18][:rows], vertical_spacing=0.16)
    traces = []
    if front:
        fx, fy = zip(*sorted(front))
        look = dict(line=dict(color="#999"), marker=dict(size=5, color="#999"), line_shape="hv")
        traces.append(go.Scatter(x=fx, y=fy, mode="lines+markers", name="optimal front (planner)", **look))
    for i, p in enumerate(points):
        marker = dict(size=13, color=palette(i), symbol=p.get("symbol", "circle"))
        label = dict(mode="markers+text", text=[p["name"]], textposition="top center", name=p["name"])
        traces.append(go.Scatter(x=[p["memory"]], y=[p[y]], marker=marker, **label))
    fig.add_traces(traces, rows=1, cols=1)
    legend_beside(style(fig, title=title, height=480 + (90 if plan is not None else 0)))
    fig.update_xaxes(title_text=xlabel, row=1, col=1)
    fig.update_yaxes(title_text=ylabel, row=1, col=1)
    if plan is not None:
        _add_strip(fig, plan, n_blocks or plan[-1][1], row=2)
    return fig


def _add_strip(fig: go.Figure, plan, n: int, row: int) -> None:
    mode_of = {i: m for s, e, m in plan for i in range(s, e)}
    starts = {s for s, e, m in plan if m != "store"}
    colors = [STATUS_COLORS["dropped"] if mode_of[i] != "store" else STATUS_COLORS["kept"] for i in range(n)]
    text = ["|" if i in starts else "" for i in range(n)]
    fig.add_trace(
        go.Bar(
            x=list(range(n)),
            y=[1] * n,
            marker_color=colors,
            text=text,
            textposition="inside",
            showlegend=False,
            hovertext=[f"block {i}: {mode_of[i]}" for i in range(n)],
            hoverinfo="text",
        ),
        row=row,
        col=1,
    )
    fig.update_yaxes(visible=False, row=row, col=1)
    fig.update_xaxes(title_text="block (green: stored, grey: checkpointed; | starts a segment)", row=row, col=1)


def segment_curves(
    curves: Mapping[str, tuple[Sequence[int], Sequence[float]]],
    marks: Mapping[str, Sequence[tuple[int, float]]],
    *,
    title: str = "",
) -> go.Figure:
    """Peak against the number of checkpointed segments, one line per curve (e.g. per sequence
    length), and labelled markers (``marks``: name -> [(k, peak), ...], e.g. "sqrt(N)", "best")."""
    fig = go.Figure()
    for i, (name, (ks, peaks)) in enumerate(curves.items()):
        fig.add_trace(go.Scatter(x=list(ks), y=list(peaks), mode="lines", name=name, line=dict(color=palette(i))))
    symbols = ["diamond", "star", "square", "x"]
    for j, (name, pts) in enumerate(marks.items()):
        fig.add_trace(
            go.Scatter(
                x=[k for k, _ in pts],
                y=[p for _, p in pts],
                mode="markers",
                name=name,
                marker=dict(size=12, symbol=symbols[j % len(symbols)], color="#333"),
            )
        )
    ylabel = "modelled peak (x one block's input)"
    return style(fig, title=title, xaxis="checkpointed segments k", yaxis=ylabel, height=440)


def memory_timeline(timelines: Mapping[str, object], *, model_peaks: Mapping[str, float] | None = None) -> go.Figure:
    """One line per strategy of bytes allocated against the allocator event's rank, a marker where
    backward starts and, with ``model_peaks``, the planner's modelled peak dotted in the same colour."""
    fig = go.Figure()
    for i, (name, tl) in enumerate(timelines.items()):
        color = palette(i)
        ys = [v / 2**20 for v in tl.live]
        fig.add_trace(go.Scatter(x=list(range(len(ys))), y=ys, mode="lines", name=name, line=dict(color=color)))
        b = min(tl.backward_at, len(ys) - 1)
        fig.add_trace(
            go.Scatter(
                x=[b],
                y=[ys[b]],
                mode="markers",
                showlegend=False,
                hovertext=f"{name}: backward starts",
                marker=dict(symbol="triangle-down", size=11, color=color),
            )
        )
        if model_peaks and name in model_peaks:
            line, hover = dict(color=color, dash="dot", width=1), f"{name}: the planner's modelled peak"
            fig.add_trace(
                level(0, len(ys) - 1, model_peaks[name] / 2**20, showlegend=False, hovertext=hover, line=line)
            )
    return style(
        fig,
        title="Allocated bytes through one step (allocator events)",
        xaxis="allocator event (▼ backward starts; dotted: modelled peak)",
        yaxis="MiB allocated",
        height=460,
    )
