"""Figures for DDP gradient accumulation and ``no_sync`` (lab 3 and its slides).

    from lab_utils.plots.ddp import comm_figure, flag_table, bucket_figure, time_figure, link_explorer
    comm_figure(result["modes"])                 # all-reduces and MB per update, per loop
    flag_table(probe_rows)                       # DDP's flags and the reducer's calls, observed
    bucket_figure(buckets["per_step"])           # all-reduces per backward, per bucket_cap_mb
    time_figure(simulated_update_seconds(sweep, link), link.name)
    link_explorer(sweep)                         # sliders: bandwidth and latency (a widget)

Data in, figure out: the numbers come from ``lab_utils.ddp`` runs; figures with simulated
communication say so in their title.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab_utils.plots import PALETTE, simulated, style

__all__ = ["MODE_COLORS", "comm_figure", "flag_table", "bucket_figure", "time_figure", "link_explorer"]

MODE_COLORS = {"naive": "#e76f51", "no_sync": "#2a9d8f", "forward_outside": "#f4a261", "compute": "#7f7f7f"}
_YES, _NO = "#d8f3dc", "#f1f1f1"


def comm_figure(
    modes: Mapping[str, Mapping[str, Any]],
    *,
    update: int = -1,
    title: str = "Gradient all-reduces of one update (counted by a comm hook)",
) -> go.Figure:
    """Two bar charts side by side: all-reduces and MB per update for each loop (``run_mode``
    results keyed by mode; ``update`` picks which update, the last by default)."""
    names = list(modes)
    counts = [modes[n]["collectives_per_update"][update] for n in names]
    mbs = [modes[n]["bytes_per_update"][update] / 2**20 for n in names]
    colors = [MODE_COLORS.get(n, PALETTE[i % len(PALETTE)]) for i, n in enumerate(names)]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("all-reduces per update", "MiB all-reduced per update"))
    fig.add_trace(
        go.Bar(x=names, y=counts, marker_color=colors, text=counts, textposition="auto", showlegend=False), 1, 1
    )
    fig.add_trace(
        go.Bar(
            x=names, y=mbs, marker_color=colors, text=[f"{v:.2f}" for v in mbs], textposition="auto", showlegend=False
        ),
        1,
        2,
    )
    return style(fig, title=title)


def flag_table(rows: Sequence[Mapping[str, Any]], *, title: str = "Observed around no_sync() (rank 0)") -> go.Figure:
    """One row per scenario of ``reducer_probe``: the flag at forward, whether forward armed the
    reducer, the flag at backward, gradient hooks fired, comm hook calls, ranks' grads equal.
    Cells that mean "synchronised" are green."""
    cols = [
        ("scenario", "scenario"),
        ("flag_at_forward", "require_backward_<br>grad_sync<br>at forward"),
        ("prepare_for_backward", "forward called<br>prepare_for_<br>backward"),
        ("flag_at_backward", "require_backward_<br>grad_sync<br>at backward"),
        ("grad_hooks", "gradient<br>hooks<br>fired"),
        ("comm_hook_calls", "all-reduces<br>(comm hook<br>calls)"),
        ("grads_equal", ".grad<br>equal on<br>all ranks"),
    ]
    values, fills = [], []
    for key, _ in cols:
        col = [r[key] for r in rows]
        values.append([str(v) for v in col])
        if key in ("scenario", "grad_hooks"):
            fills.append(["white"] * len(col))
        else:
            fills.append(
                [
                    _YES if (v is True or (isinstance(v, int) and not isinstance(v, bool) and v > 0)) else _NO
                    for v in col
                ]
            )
    fig = go.Figure(
        go.Table(
            header=dict(values=[c[1] for c in cols], fill_color="#e9ecef", align="left", height=64),
            cells=dict(values=values, fill_color=fills, align="left", height=30),
            columnwidth=[2.8, 1.4, 1.3, 1.4, 0.8, 1.0, 0.9],
        )
    )
    return style(fig, title=title, height=200 + 40 * len(rows))


def bucket_figure(
    per_step: Mapping[str, Sequence[int]], *, title: str = "All-reduces per backward, by bucket_cap_mb"
) -> go.Figure:
    """Grouped bars: for each ``bucket_cap_mb`` (key; 'None' = DDP's default), the all-reduces
    of backward 1, 2, 3, ... (the first one runs before DDP rebuilds its buckets)."""
    fig = go.Figure()
    n = max(len(v) for v in per_step.values())
    labels = [("default" if k == "None" else f"{k} MB") for k in per_step]
    for s in range(n):
        ys = [v[s] if s < len(v) else 0 for v in per_step.values()]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=ys,
                name=f"backward {s + 1}" + (" (before rebuild)" if s == 0 else ""),
                text=ys,
                textposition="auto",
                marker_color=PALETTE[s % len(PALETTE)],
            )
        )
    fig.update_layout(barmode="group")
    style(fig, title=title, xaxis="bucket_cap_mb", yaxis="all-reduces")
    return fig.update_layout(margin=dict(t=100))  # room for the legend under the title


def time_figure(sim: Mapping[str, Sequence[float]], link_name: str = "", *, title: str = "") -> go.Figure:
    """Seconds per update against K: measured compute, and compute plus simulated communication
    for the naive loop and for ``no_sync`` (``ddp.simulated_update_seconds`` output)."""
    fig = go.Figure()
    _time_traces(fig, sim)
    t = title or f"Time per update vs K on {link_name or 'a link'}"
    style(fig, title=simulated(t), xaxis="K (micro-steps per update)", yaxis="seconds per update")
    fig.update_xaxes(type="log", tickvals=list(sim["k"]))
    return fig.update_layout(margin=dict(t=100))  # room for the legend under the title


def _time_traces(fig: go.Figure, sim: Mapping[str, Sequence[float]]) -> None:
    for key, name, dash in (
        ("naive", "naive: K all-reduce rounds", "solid"),
        ("no_sync", "no_sync: one all-reduce round", "solid"),
        ("compute", "compute alone (measured)", "dot"),
    ):
        fig.add_trace(
            go.Scatter(
                x=list(sim["k"]),
                y=list(sim[key]),
                name=name,
                mode="lines+markers",
                line=dict(color=MODE_COLORS[key], dash=dash),
            )
        )


def link_explorer(sweep: Mapping[str, Any], world_size: int | None = None, *, preset: str = "10GbE") -> Any:
    """A widget: pick a link preset or move the bandwidth (Gbit/s) and latency (us) sliders; the
    figure below shows ``time_figure`` for that link, recomputed from the measured sweep.
    (Redraws into an ``Output``: plotly's ``FigureWidget`` would need the anywidget package.)"""
    import ipywidgets as W

    from lab_utils.ddp import simulated_update_seconds
    from lab_utils.simnet import LINKS, Link
    from lab_utils.widgets import show_figure

    start = LINKS[preset]
    drop = W.Dropdown(options=list(LINKS) + ["custom"], value=preset, description="link")
    bw = W.FloatLogSlider(
        value=start.bandwidth_Bps * 8 / 1e9,
        base=10,
        min=-1,
        max=3.6,
        step=0.05,
        description="Gbit/s",
        readout_format=".3g",
        continuous_update=False,
    )
    lat = W.FloatLogSlider(
        value=start.latency_s * 1e6,
        base=10,
        min=0,
        max=4.5,
        step=0.05,
        description="latency us",
        readout_format=".3g",
        continuous_update=False,
    )
    out = W.Output()
    busy = [False]

    def redraw() -> None:
        link = Link.from_gbit(drop.value, bw.value, lat.value)
        fig = time_figure(
            simulated_update_seconds(sweep, link, world_size),
            f"{drop.value} ({bw.value:.3g} Gbit/s, {lat.value:.3g} us)",
        )
        show_figure(out, fig)

    def on_preset(change: Any) -> None:
        if change["new"] == "custom" or busy[0]:
            return
        link = LINKS[change["new"]]
        busy[0] = True
        bw.value, lat.value = link.bandwidth_Bps * 8 / 1e9, link.latency_s * 1e6
        busy[0] = False
        redraw()

    def on_slider(_: Any) -> None:
        if busy[0]:
            return
        busy[0] = True
        drop.value = "custom"
        busy[0] = False
        redraw()

    drop.observe(on_preset, names="value")
    bw.observe(on_slider, names="value")
    lat.observe(on_slider, names="value")
    redraw()
    return W.VBox([W.HBox([drop, bw, lat]), out])
