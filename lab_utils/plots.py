"""Plotly figures shared by the labs and the slide decks: plain functions, data in, figure out.

    from lab_utils import plots
    fig = plots.bars({"naive": 8, "no_sync": 2}, title="all-reduces per update", yaxis="count")
    fig = plots.lines({"H=1": losses1, "H=8": losses8}, xaxis="step", yaxis="loss")
    fig = plots.anatomy_bars({"measured": {"weights": 4.0, ...}, "predicted": {...}})   # MiB

    show_figure(out, fig, text="one line under it")   # redraw inside an ipywidgets.Output

Each lab's own figures live with its package (``lab_utils.labs.labNN_*.figures``) and are built
from these helpers. A figure that shows modelled numbers says so in its title (``modelled()``).

Why ``show_figure`` and not ``go.FigureWidget``: with plotly 6+ that needs the ``anywidget``
package. Why not ``with out: fig.show()``: notebook runners that store no widget state (nbconvert,
nbval) trip over captured output. Setting ``out.outputs`` to plotly's own mime bundle works in
JupyterLab and in those runners alike, and replaces the previous figure instead of adding one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

__all__ = [
    "style",
    "legend_beside",
    "bars",
    "grouped",
    "lines",
    "modelled",
    "slider_over",
    "anatomy_bars",
    "ANATOMY_COLORS",
    "level",
    "PALETTE",
    "palette",
    "show_figure",
]

PLOTLY_MIME = "application/vnd.plotly.v1+json"

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def palette(i: int) -> str:
    """The ``i``-th colour of ``PALETTE``, cycling."""
    return PALETTE[i % len(PALETTE)]


def style(fig: go.Figure, *, title: str = "", xaxis: str = "", yaxis: str = "", height: int = 420) -> go.Figure:
    """The common look: white background, readable fonts for a projector, titled axes."""
    # The title sits at the top of the figure, the legend on its own row just above the plot.
    fig.update_layout(
        title=dict(text=title, y=0.98, yanchor="top"),
        template="plotly_white",
        height=height,
        font=dict(size=14),
        margin=dict(l=60, r=20, t=95 if title else 40, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    fig.update_xaxes(title_text=xaxis)
    fig.update_yaxes(title_text=yaxis)
    return fig


def legend_beside(fig: go.Figure) -> go.Figure:
    """The legend in a column right of the plot: for a figure whose legend, above the plot, would
    wrap onto the title or cover its subplots' titles (many entries, or subplots)."""
    fig.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"))
    return fig


def level(x0: float, x1: float, y: float, **kw) -> go.Scatter:
    """A horizontal line from ``x0`` to ``x1`` at ``y``, as a trace: unlike ``add_hline`` it can
    have hover text and a legend entry."""
    return go.Scatter(x=[x0, x1], y=[y, y], mode="lines", **kw)


def modelled(title: str) -> str:
    """Mark a title as showing modelled numbers (a cost model's prediction, not a measurement)."""
    return f"{title} <i>(modelled communication)</i>"


def bars(
    values: Mapping[str, float],
    *,
    title: str = "",
    yaxis: str = "",
    text_format: str = "{:g}",
) -> go.Figure:
    """One bar per key, its value written on it."""
    names, ys = list(values), list(values.values())
    fig = go.Figure(
        go.Bar(
            x=names,
            y=ys,
            text=[text_format.format(v) for v in ys],
            textposition="auto",
            marker_color=PALETTE[: len(names)],
        )
    )
    return style(fig, title=title, yaxis=yaxis)


def grouped(
    values: Mapping[str, Mapping[str, float]],
    *,
    title: str = "",
    xaxis: str = "",
    yaxis: str = "",
    scale: float = 1.0,
) -> go.Figure:
    """Grouped bars from ``{x: {series: value}}`` (e.g. ``{link: {method: seconds}}``), values x ``scale``,
    on a log y axis."""
    xs = list(values)
    series = list(next(iter(values.values())))
    fig = go.Figure(
        [
            go.Bar(x=xs, y=[values[x][s] * scale for x in xs], name=s, marker_color=palette(i))
            for i, s in enumerate(series)
        ]
    )
    fig.update_layout(barmode="group")
    fig.update_yaxes(type="log")
    return style(fig, title=title, xaxis=xaxis, yaxis=yaxis)


def lines(
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    xaxis: str = "",
    yaxis: str = "",
    log_y: bool = False,
) -> go.Figure:
    """One line per key over 0, 1, 2, ..."""
    fig = go.Figure()
    for i, (name, ys) in enumerate(series.items()):
        fig.add_trace(
            go.Scatter(x=list(range(len(ys))), y=list(ys), mode="lines", name=name, line=dict(color=palette(i)))
        )
    style(fig, title=title, xaxis=xaxis, yaxis=yaxis)
    if log_y:
        fig.update_yaxes(type="log")
    return fig


ANATOMY_COLORS = {
    "weights": "#1f77b4",
    "gradients": "#aec7e8",
    "optimizer": "#9467bd",
    "activations": "#2ca02c",
    "temporaries": "#ff7f0e",
    "CUDA context (assumed)": "#7f7f7f",
    "not predicted": "#dddddd",
}


def anatomy_bars(columns: Mapping[str, Mapping[str, float]], *, title: str = "", digits: int = 1) -> go.Figure:
    """Stacked bars, one per column (e.g. "batch 4, measured" and "batch 4, predicted"), each
    stacking the parts of a step's memory in MiB (keys of ``ANATOMY_COLORS``; missing parts are 0).
    Labs 1 and 8 (``figures.anatomy_bars``, ``figures.parts``)."""
    fig = go.Figure()
    names = list(columns)
    parts = [p for p in ANATOMY_COLORS if any(p in c for c in columns.values())]
    for part in parts:
        fig.add_trace(
            go.Bar(
                x=names,
                y=[columns[n].get(part, 0) for n in names],
                name=part,
                marker_color=ANATOMY_COLORS[part],
                hovertemplate=f"{part}: %{{y:.{digits}f}} MiB<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    return style(fig, title=title, yaxis="MiB", height=440)


def slider_over(figs: dict[str, go.Figure], *, label: str) -> go.Figure:
    """One figure with a plotly slider choosing among ``figs`` (same kind of figure, e.g. one per
    network link): the traces of the chosen one are shown and its title is used. This is how a
    lab's ipywidgets explorer becomes interactive in a static deck, with the lab's own figures."""
    names = list(figs)
    out = go.Figure(layout=figs[names[0]].layout)
    owner: list[int] = []
    for i, name in enumerate(names):
        for tr in figs[name].data:
            out.add_trace(tr.update(visible=(i == 0)))
            owner.append(i)
    steps = [
        dict(
            method="update",
            label=name,
            args=[{"visible": [o == i for o in owner]}, {"title.text": figs[name].layout.title.text}],
        )
        for i, name in enumerate(names)
    ]
    out.update_layout(
        sliders=[
            dict(
                active=0,
                steps=steps,
                currentvalue=dict(prefix=f"{label}: "),
                pad=dict(t=60),
                len=0.9,
                x=0.05,
            )
        ]
    )
    return out


def show_figure(out: Any, fig: Any, text: str = "") -> None:
    """Replace what the ``Output`` widget ``out`` shows with ``fig`` (and ``text`` below it)."""
    bundle = {PLOTLY_MIME: {**json.loads(pio.to_json(fig)), "config": {}}, "text/plain": "<Figure>"}
    outputs = [{"output_type": "display_data", "data": bundle, "metadata": {}}]
    if text:
        outputs.append({"output_type": "stream", "name": "stdout", "text": text + "\n"})
    out.outputs = tuple(outputs)
