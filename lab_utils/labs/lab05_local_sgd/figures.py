"""Figures of the local SGD lab; the slide deck shows their stored outputs.

Inputs are what ``record.gather`` (``Run``), ``run_accelerate`` (``AccelerateRun``),
``study.run_seeds`` (``Seeds``) and ``diloco.load_stored`` (``Point``) return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.colors import hex_to_rgb

from lab_utils.labs.lab05_local_sgd.cost import elapsed_seconds
from lab_utils.labs.lab05_local_sgd.diloco import Point
from lab_utils.labs.lab05_local_sgd.record import Run
from lab_utils.labs.lab05_local_sgd.study import Seeds
from lab_utils.netmodel import Link
from lab_utils.plots import modelled, palette, style

if TYPE_CHECKING:  # the runs' module imports Accelerate; the figures only read its records
    from lab_utils.labs.lab05_local_sgd.accelerate_runs import AccelerateRun

__all__ = ["spread", "loss", "traffic", "wallclock", "schedule", "seeds_band"]


def _measured(title: str) -> str:
    """Titles of figures drawn from runs on this machine say so (modelled ones use ``modelled``)."""
    return f"measured: {title}"


def _line(x, y, name: str, i: int, *, mode: str = "lines", **kw) -> go.Scatter:
    return go.Scatter(x=list(x), y=list(y), mode=mode, name=name, line=dict(color=palette(i)), **kw)


def spread(run: Run, *, title: str = "") -> go.Figure:
    """How far the ranks' parameters are apart after each step (a run with ``spread=True``)."""
    drift = run.drift
    if not drift:
        raise ValueError("this run recorded no drift: run it with record.run(..., spread=True)")
    steps = list(range(len(drift)))
    synced = [s for s in run.synced_steps if s < len(drift)]
    fig = go.Figure(_line(steps, drift, "largest distance to the mean", 0))
    fig.add_trace(
        go.Scatter(
            x=synced,
            y=[drift[s] for s in synced],
            mode="markers",
            name="after averaging",
            marker=dict(color=palette(3), size=9, symbol="x"),
        )
    )
    return style(
        fig,
        title=title or "ranks drift apart, averaging rejoins them",
        xaxis="step",
        yaxis="‖θ_rank − mean θ‖ (largest over ranks)",
    )


def loss(runs: Mapping[str, Run], names: Sequence[str], *, title: str = "") -> go.Figure:
    """Held-out loss of the ranks' mean model against optimizer steps."""
    fig = go.Figure()
    for i, name in enumerate(names):
        curve = runs[name].eval_curve
        fig.add_trace(_line([s for s, _ in curve], [v for _, v in curve], name, i))
    return style(
        fig,
        title=_measured(title or "loss against steps (equal work per step)"),
        xaxis="optimizer step",
        yaxis="held-out loss",
    )


def traffic(runs: Mapping[str, Run], names: Sequence[str]) -> go.Figure:
    """Counted bytes each rank sent, log scale."""
    names = list(names)
    ys = [runs[n].comm["bytes"] for n in names]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=ys,
            text=[f"{y / 1e6:.2f} MB" for y in ys],
            textposition="outside",
            marker_color=[palette(i) for i in range(len(names))],
        )
    )
    style(fig, title="bytes sent per rank (counted)", yaxis="bytes (log scale)")
    fig.update_yaxes(type="log")
    return fig


def wallclock(
    runs: Mapping[str, Run], link: Link, world_size: int, step_seconds: float, names: Sequence[str]
) -> go.Figure:
    """Held-out loss against time: measured compute per step + modelled communication on ``link``."""
    fig = go.Figure()
    for i, name in enumerate(names):
        r = runs[name]
        t = elapsed_seconds(r, link, world_size, step_seconds)
        xs, ys = [t[s - 1] for s, _ in r.eval_curve], [v for _, v in r.eval_curve]
        fig.add_trace(_line(xs, ys, name, i, mode="lines+markers", marker=dict(size=4)))
    style(
        fig,
        title=modelled(f"loss against time on {link.name}"),
        xaxis="seconds (compute measured + communication modelled)",
        yaxis="held-out loss",
    )
    fig.update_xaxes(type="log")
    return fig


def schedule(results: Mapping[str, AccelerateRun]) -> go.Figure:
    """One row per Accelerate run: micro-batches, optimizer updates, averagings after an update
    (green) or inside a window (red); one at x = number of micro-batches is the exit averaging."""
    fig = go.Figure()
    shown: set[str] = set()
    names = list(results)
    for row, name in enumerate(names):
        r = results[name]
        ups = [i for i, f in enumerate(r.sync_flags) if f]
        avg = {ok: [a.micro_batch for a in r.averagings if a.on_update_boundary == ok] for ok in (True, False)}
        down = dict(size=11, symbol="triangle-down")
        for xs, dy, label, marker in (
            (list(range(r.micro_batches)), 0, "micro-batch", dict(color="lightgrey", size=8)),
            (ups, 0, "optimizer update", dict(color=palette(0), size=10, symbol="line-ns-open", line=dict(width=3))),
            (avg[True], 0.25, "averaging after an update", dict(color=palette(2), **down)),
            (avg[False], 0.25, "averaging inside a window", dict(color=palette(3), **down)),
        ):
            legend = row == 0 if dy == 0 else bool(xs) and label not in shown  # averagings: the first row that has one
            fig.add_trace(
                go.Scatter(x=xs, y=[row + dy] * len(xs), mode="markers", name=label, showlegend=legend, marker=marker)
            )
            shown |= {label} if xs else set()
    style(
        fig,
        title="Accelerate LocalSGD: when parameters are averaged (counted all-reduces)",
        xaxis="micro-batch",
        height=120 + 70 * len(names),
    )
    fig.update_yaxes(tickvals=list(range(len(names))), ticktext=names, range=[-0.6, len(names) - 0.3])
    return fig


def seeds_band(
    study: Mapping[str, Seeds | Point],
    names: Sequence[str],
    *,
    per_round: int,
    title: str,
    xaxis: str = "communication rounds (all-reduces of the whole model)",
) -> go.Figure:
    """Held-out loss against communication rounds (step / ``per_round``; ``per_round=1`` and an
    ``xaxis`` of steps for runs that communicate at different rates): the seeds' mean as a line,
    their best and worst as a band. Overlapping bands can still rank seed by seed (``study.sign_test``)."""
    fig = go.Figure()
    for i, name in enumerate(names):
        curve = study[name].curve
        xs = [s / per_round for s, _ in curve]
        lo, hi = [min(v) for _, v in curve], [max(v) for _, v in curve]
        mean = [sum(v) / len(v) for _, v in curve]
        fig.add_trace(
            go.Scatter(
                x=xs + xs[::-1],
                y=hi + lo[::-1],
                fill="toself",
                fillcolor="rgba({},{},{},0.18)".format(*hex_to_rgb(palette(i))),
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
            )
        )
        fig.add_trace(_line(xs, mean, name, i, mode="lines+markers"))
    return style(
        fig,
        title=_measured(title),
        xaxis=xaxis,
        yaxis="held-out loss",
    )
