"""Lab 3's figures: data in (results of ``workload.train``, ``reducer.probe``, ``buckets.counts``,
``stamps.measure``), plotly figure out.

    from lab_utils.labs.lab03_ddp import figures
    figures.comm(results)              # all-reduces and MiB per update, one bar per loop
    figures.flags(rows)                # DDP's flags and the reducer's calls, observed
    figures.buckets(per_step)          # all-reduces per backward, per bucket_cap_mb
    figures.time_per_update(stamps.update_seconds(measured, link), link.name)
    figures.explorer(measured)         # ipywidgets: bandwidth and latency sliders
    figures.hooks(settings.hooks)      # bytes per update and distance to float32, per comm hook

Figures with modelled communication say so in their title.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab_utils.labs.lab03_ddp.reducer import Observed
from lab_utils.labs.lab03_ddp.settings import HookRun, Refused
from lab_utils.labs.lab03_ddp.stamps import Sweep, update_seconds
from lab_utils.labs.lab03_ddp.workload import UpdateRun
from lab_utils.netmodel import LINKS, Link
from lab_utils.plots import PALETTE, modelled, palette, show_figure, style

__all__ = ["COLORS", "comm", "flags", "buckets", "time_per_update", "explorer", "hooks"]

COLORS = {"naive": "#e76f51", "no_sync": "#2a9d8f", "forward_outside": "#f4a261", "compute": "#7f7f7f"}
_YES, _NO = "#d8f3dc", "#f1f1f1"


def _color(name: str, i: int) -> str:
    return COLORS.get(name, palette(i))


def comm(results: Mapping[str, UpdateRun]) -> go.Figure:
    """Two bar charts side by side: all-reduces and MiB of the last update for each loop (``train``
    results keyed by loop name)."""
    names = list(results)
    counts = [results[n].collectives_per_update[-1] for n in names]
    mibs = [results[n].bytes_per_update[-1] / 2**20 for n in names]
    colors = [_color(n, i) for i, n in enumerate(names)]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("all-reduces per update", "MiB all-reduced per update"))
    fig.add_trace(go.Bar(x=names, y=counts, marker_color=colors, text=counts, showlegend=False), 1, 1)
    text = [f"{v:.2f}" for v in mibs]
    fig.add_trace(go.Bar(x=names, y=mibs, marker_color=colors, text=text, showlegend=False), 1, 2)
    return style(fig, title="Gradient all-reduces of one update (counted by a comm hook)")


def flags(rows: Sequence[Observed]) -> go.Figure:
    """A table, one row per scenario of ``reducer.probe``; cells that mean "synchronised" are green."""
    cols = [
        ("scenario", "scenario"),
        ("flag_at_forward", "require_backward_<br>grad_sync<br>at forward"),
        ("prepare_for_backward", "forward called<br>prepare_for_<br>backward"),
        ("flag_at_backward", "require_backward_<br>grad_sync<br>at backward"),
        ("grad_hooks", "gradient<br>hooks<br>fired"),
        ("reducer_hooks", "gradients the<br>reducer's hook<br>bucketed"),
        ("comm_hook_calls", "all-reduces<br>(comm hook<br>calls)"),
        ("grads_equal", ".grad<br>equal on<br>all ranks"),
    ]
    values, fills = [], []
    for key, _ in cols:
        col = [getattr(r, key) for r in rows]
        values.append([str(v) for v in col])
        neutral = key in ("scenario", "grad_hooks")
        fills.append(["white" if neutral else (_YES if v is True or (type(v) is int and v > 0) else _NO) for v in col])
    fig = go.Figure(
        go.Table(
            header=dict(values=[c[1] for c in cols], fill_color="#e9ecef", align="left", height=64),
            cells=dict(values=values, fill_color=fills, align="left", height=30),
            columnwidth=[2.8, 1.4, 1.3, 1.4, 0.8, 1.1, 1.0, 0.9],
        )
    )
    return style(fig, title="Observed around no_sync() (rank 0)", height=200 + 40 * len(rows))


def buckets(per_step: Mapping[str, Sequence[int]]) -> go.Figure:
    """Grouped bars: for each ``bucket_cap_mb`` (key; 'None' = DDP's default), the all-reduces of
    backward 1, 2, 3, ... (the first one runs before DDP rebuilds its buckets)."""
    fig = go.Figure()
    n = max(len(v) for v in per_step.values())
    labels = [("default" if k == "None" else f"{k} MB") for k in per_step]
    for s in range(n):
        ys = [v[s] if s < len(v) else 0 for v in per_step.values()]
        name = f"backward {s + 1}" + (" (before rebuild)" if s == 0 else "")
        fig.add_trace(go.Bar(x=labels, y=ys, name=name, text=ys, marker_color=palette(s)))
    fig.update_layout(barmode="group")
    style(fig, title="All-reduces per backward, by bucket_cap_mb", xaxis="bucket_cap_mb", yaxis="all-reduces")
    return fig.update_layout(margin=dict(t=100))  # room for the legend under the title


def time_per_update(sim: Mapping[str, Sequence[float]], link_name: str) -> go.Figure:
    """Seconds per update against K: the measured compute, and compute plus modelled
    communication for each loop in ``sim`` (``stamps.update_seconds`` output)."""
    fig = go.Figure()
    loops = [n for n in sim if n not in ("k", "compute")]
    for i, name in enumerate([*loops, "compute"]):
        label = "compute alone (measured)" if name == "compute" else name
        fig.add_trace(
            go.Scatter(
                x=list(sim["k"]),
                y=list(sim[name]),
                name=label,
                mode="lines+markers",
                line=dict(color=_color(name, i), dash="dot" if name == "compute" else "solid"),
            )
        )
    t = f"Time per update vs K, {link_name} (low on average on a real link)"
    style(fig, title=modelled(t), xaxis="K (micro-steps per update)", yaxis="seconds per update")
    fig.update_xaxes(type="log", tickvals=list(sim["k"]))
    # The legend goes under the plot: above it, a long title and the legend collided at 1280 x 720.
    return fig.update_layout(margin=dict(t=60, b=120), legend=dict(orientation="h", yanchor="top", y=-0.25, x=0))


def explorer(measured: Sweep, *, preset: str = "10GbE") -> ipywidgets.VBox:
    """A widget: pick a preset link or move the bandwidth (Gbit/s) and latency (us) sliders; the
    figure below is ``time_per_update`` for that link, recomputed from the measured sweep."""
    if preset not in LINKS:
        raise ValueError(f"preset={preset!r} is not one of {list(LINKS)}")
    start = LINKS[preset]
    drop = ipywidgets.Dropdown(options=list(LINKS) + ["custom"], value=preset, description="link")
    slider = dict(base=10, step=0.05, readout_format=".3g", continuous_update=False)
    bw = ipywidgets.FloatLogSlider(value=start.bandwidth_Bps * 8 / 1e9, min=-1, max=3.6, description="Gbit/s", **slider)
    lat = ipywidgets.FloatLogSlider(value=start.latency_s * 1e6, min=0, max=4.5, description="latency us", **slider)
    out = ipywidgets.Output()
    busy = [False]

    def redraw() -> None:
        link = Link.from_gbit(drop.value, bw.value, lat.value)
        name = f"{drop.value} ({bw.value:.3g} Gbit/s, {lat.value:.3g} us)"
        show_figure(out, time_per_update(update_seconds(measured, link), name))

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
    return ipywidgets.VBox([ipywidgets.HBox([drop, bw, lat]), out])


def hooks(results: Mapping[str, HookRun | Refused], *, update: int = -1, title: str = "") -> go.Figure:
    """Bars per comm hook: bytes all-reduced in one update (``update``, the last by default) and
    the parameters' largest distance to the float32 all-reduce run; refused hooks are left out."""
    runs = {n: r for n, r in results.items() if isinstance(r, HookRun)}
    names = list(runs)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("KiB sent per update", "max |params - float32 run|"))
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(names))]
    kib = [r.bytes_per_update[update] / 1024 for r in runs.values()]
    fig.add_trace(go.Bar(x=names, y=kib, marker_color=colors, text=[f"{v:.0f}" for v in kib], showlegend=False), 1, 1)
    diff = [r.max_diff for r in runs.values()]
    fig.add_trace(go.Bar(x=names, y=diff, marker_color=colors, text=[f"{v:.1e}" for v in diff], showlegend=False), 1, 2)
    return style(fig, title=title or "DDP comm hooks: what crosses the wire and what it does to the result")
