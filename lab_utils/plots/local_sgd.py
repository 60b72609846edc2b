"""Figures of the local SGD lab (labs/05_local_sgd.ipynb), reused by the slides.

    from lab_utils.plots import local_sgd as P
    P.rank_spread(runs["H=8"])                          # ranks drift apart, averaging rejoins them
    P.loss_curves(runs, ["DDP", "H=8", "H=32"])         # held-out loss against steps
    P.loss_vs_time(runs, LINKS["1GbE"], 2, step_s)      # the same against simulated time
    P.time_vs_h(runs, LINKS, 2, step_s)                 # where local SGD wins, where it stops helping
    P.accelerate_timeline(results)                      # micro-batches, updates and averagings

Inputs are the plain dicts that ``lab_utils.local_sgd.sweep`` / ``accelerate_run`` return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from lab_utils.local_sgd import rank_spread as _spread
from lab_utils.local_sgd import simulated_seconds
from lab_utils.plots import PALETTE, simulated, style

__all__ = ["rank_spread", "loss_curves", "comm_bytes", "loss_vs_time", "time_vs_h", "accelerate_timeline"]


def rank_spread(run: dict, *, title: str = "") -> go.Figure:
    """Difference between the ranks' parameter checksums after each step, averagings marked."""
    spread = _spread(run)
    steps = list(range(len(spread)))
    fig = go.Figure(
        go.Scatter(x=steps, y=spread, mode="lines", name="max - min over ranks", line=dict(color=PALETTE[0]))
    )
    synced = [s for s in run["synced_steps"] if s < len(spread)]
    fig.add_trace(
        go.Scatter(
            x=synced,
            y=[spread[s] for s in synced],
            mode="markers",
            name="after averaging",
            marker=dict(color=PALETTE[3], size=9, symbol="x"),
        )
    )
    return style(
        fig,
        title=title or f"{run['method']} H={run['H']}: ranks drift apart, averaging rejoins them",
        xaxis="step",
        yaxis="checksum difference between ranks",
    )


def loss_curves(
    runs: Mapping[str, dict], names: Sequence[str] | None = None, *, title: str = "", key: str = "eval_curve"
) -> go.Figure:
    """Held-out loss of the ranks' mean model against optimizer steps (``key="losses"``: the
    training batch loss, averaged over ranks)."""
    fig = go.Figure()
    for i, name in enumerate(names or list(runs)):
        r = runs[name]
        xs, ys = (
            (list(range(1, len(r[key]) + 1)), r[key])
            if key == "losses"
            else ([s for s, _ in r[key]], [v for _, v in r[key]])
        )
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=PALETTE[i % len(PALETTE)])))
    return style(
        fig,
        title=title or "loss against steps (equal work per step)",
        xaxis="optimizer step",
        yaxis="held-out loss" if key != "losses" else "training loss",
    )


def comm_bytes(runs: Mapping[str, dict], names: Sequence[str] | None = None, *, title: str = "") -> go.Figure:
    """Counted bytes each rank sent, log scale."""
    names = list(names or runs)
    ys = [runs[n]["comm"]["bytes"] for n in names]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=ys,
            text=[f"{y / 1e6:.2f} MB" for y in ys],
            textposition="outside",
            marker_color=[PALETTE[i % len(PALETTE)] for i in range(len(names))],
        )
    )
    style(fig, title=title or "bytes sent per rank (counted)", yaxis="bytes (log scale)")
    fig.update_yaxes(type="log")
    return fig


def loss_vs_time(
    runs: Mapping[str, dict], link: Any, world_size: int, step_seconds: float, names: Sequence[str] | None = None
) -> go.Figure:
    """Held-out loss against wall-clock time: measured compute + simulated communication."""
    fig = go.Figure()
    for i, name in enumerate(names or list(runs)):
        r = runs[name]
        t = simulated_seconds(r, link, world_size, step_seconds)
        xs = [t[min(s, len(t)) - 1] for s, _ in r["eval_curve"]]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[v for _, v in r["eval_curve"]],
                mode="lines+markers",
                name=name,
                line=dict(color=PALETTE[i % len(PALETTE)]),
                marker=dict(size=4),
            )
        )
    style(
        fig,
        title=simulated(f"loss against time on {link.name}"),
        xaxis="seconds (compute measured + communication simulated)",
        yaxis="held-out loss",
    )
    fig.update_xaxes(type="log")
    return fig


def time_vs_h(
    runs: Mapping[str, dict],
    links: Mapping[str, Any],
    world_size: int,
    step_seconds: float,
    Hs: Sequence[int] | None = None,
) -> go.Figure:
    """Total time of the run against H, one line per link, DDP as a dashed level: local SGD wins
    where the lines fall, and stops helping where they flatten onto the compute floor."""
    Hs = list(Hs or sorted(int(k[2:]) for k in runs if k.startswith("H=")))
    fig = go.Figure()
    for i, (lname, link) in enumerate(links.items()):
        color = PALETTE[i % len(PALETTE)]
        ys = [simulated_seconds(runs[f"H={h}"], link, world_size, step_seconds)[-1] for h in Hs]
        fig.add_trace(go.Scatter(x=Hs, y=ys, mode="lines+markers", name=lname, line=dict(color=color)))
        if "DDP" in runs:
            d = simulated_seconds(runs["DDP"], link, world_size, step_seconds)[-1]
            fig.add_trace(
                go.Scatter(
                    x=[Hs[0], Hs[-1]],
                    y=[d, d],
                    mode="lines",
                    showlegend=False,
                    line=dict(color=color, dash="dot"),
                    hovertext=f"DDP on {lname}",
                )
            )
    floor = step_seconds * next(iter(runs.values()))["steps"]
    fig.add_trace(
        go.Scatter(
            x=[Hs[0], Hs[-1]],
            y=[floor, floor],
            mode="lines",
            name="compute alone",
            line=dict(color="black", dash="dash"),
        )
    )
    style(
        fig,
        title=simulated("time of the whole run against H (dotted: DDP)"),
        xaxis="H (local steps per averaging)",
        yaxis="seconds (log scale)",
    )
    fig.update_xaxes(type="log", tickvals=Hs, ticktext=[str(h) for h in Hs])
    fig.update_yaxes(type="log")
    return fig


def accelerate_timeline(results: Mapping[str, dict]) -> go.Figure:
    """One row per Accelerate run: micro-batches (grey), optimizer updates (blue), parameter
    averagings on an update boundary (green) or inside an accumulation window (red); the one
    at x = number of micro-batches is the averaging at exit."""
    fig = go.Figure()
    names = list(results)
    shown: set[str] = set()
    for row, name in enumerate(names):
        r = results[name]
        n = r["micro_batches"]
        fig.add_trace(
            go.Scatter(
                x=list(range(n)),
                y=[row] * n,
                mode="markers",
                showlegend=row == 0,
                name="micro-batch",
                marker=dict(color="lightgrey", size=8),
            )
        )
        ups = [i for i, f in enumerate(r["sync_flags"]) if f]
        fig.add_trace(
            go.Scatter(
                x=ups,
                y=[row] * len(ups),
                mode="markers",
                showlegend=row == 0,
                name="optimizer update",
                marker=dict(color=PALETTE[0], size=10, symbol="line-ns-open", line=dict(width=3)),
            )
        )
        for ok, color, label in (
            (True, PALETTE[2], "averaging after an update"),
            (False, PALETTE[3], "averaging inside a window"),
        ):
            xs = [a["micro_batch"] for a in r["averagings"] if a["on_update_boundary"] == ok]
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[row + 0.25] * len(xs),
                    mode="markers",
                    name=label,
                    showlegend=bool(xs) and label not in shown,
                    marker=dict(color=color, size=11, symbol="triangle-down"),
                )
            )
            shown |= {label} if xs else set()
    style(
        fig,
        title="Accelerate LocalSGD: when parameters are averaged (counted all-reduces)",
        xaxis="micro-batch",
        yaxis="",
        height=120 + 70 * len(names),
    )
    fig.update_yaxes(tickvals=list(range(len(names))), ticktext=names, range=[-0.6, len(names) - 0.3])
    return fig
