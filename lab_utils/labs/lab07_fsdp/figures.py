"""Lab 7's figures: data measured in the lab in, a plotly figure out.

from lab_utils.labs.lab07_fsdp import figures
figures.holdings(held, param_bytes)        # bytes per rank of each setup, with the ZeRO formulas
figures.traffic(ops, param_bytes)          # collectives of one step, in parameter bytes P
figures.accumulation(held_by_mode, rs_bytes_by_mode)   # gradient bytes between micro-steps
figures.links(seconds_by_link)             # modelled seconds per update on each link
figures.checkpointing(saved_by_setup)      # bytes saved for backward by one forward
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab_utils.labs.lab07_fsdp.holdings import zero_bytes
from lab_utils.plots import PALETTE, bars, grouped, legend_beside, modelled, palette, style

__all__ = ["holdings", "traffic", "accumulation", "links", "checkpointing"]

KINDS = ("params", "grads", "optimizer")
MIB = 2**20


def holdings(held: Mapping[int, Sequence[Mapping[str, Any]]], param_bytes: int) -> go.Figure:
    """Stacked bars of rank 0's measured bytes (each setup at each world size: ``held[world][0]``
    maps a setup to ``{"bytes": ...}``), with the ZeRO stage 0-3 formulas' totals as markers."""
    fig = go.Figure()
    cols = [(m, w) for w in held for m, r in held[w][0].items() if isinstance(r, Mapping) and "bytes" in r]
    names = [f"{m}<br>{w} ranks" for m, w in cols]
    for i, kind in enumerate(KINDS):
        ys = [held[w][0][m]["bytes"][kind] / MIB for m, w in cols]
        fig.add_trace(go.Bar(x=names, y=ys, name=f"{kind} (measured)", marker_color=palette(i)))
    for stage, symbol in enumerate(("circle", "square", "diamond", "x")):
        ys = [sum(zero_bytes(param_bytes, world_size=w, stage=stage).values()) / MIB for _, w in cols]
        fig.add_trace(
            go.Scatter(x=names, y=ys, mode="markers", name=f"ZeRO-{stage} formula", marker=dict(symbol=symbol, size=11))
        )
    fig.update_layout(barmode="stack")
    return style(fig, title="What one rank holds after an AdamW step", yaxis="MiB per rank", height=460)


def traffic(ops: Mapping[str, Mapping[str, Mapping[str, int]]], param_bytes: int) -> go.Figure:
    """Bytes of each kind of collective in one step, per run (``{run: traffic.per_op(...)}``),
    in units of the parameter bytes P."""
    fig = go.Figure()
    kinds = sorted({op for per in ops.values() for op in per})
    for i, op in enumerate(kinds):
        ys = [per.get(op, {"bytes": 0})["bytes"] / param_bytes for per in ops.values()]
        fig.add_trace(
            go.Bar(x=list(ops), y=ys, name=op, marker_color=palette(i), text=[f"{y:.3g} P" if y else "" for y in ys])
        )
    fig.update_layout(barmode="stack")
    return style(fig, title="One training step's collectives (counted)", yaxis="bytes / parameter bytes P")


def accumulation(held: Mapping[str, Sequence[int]], reduce_scattered: Mapping[str, int]) -> go.Figure:
    """Left: gradient bytes a rank holds after each micro-step of one update, per mode. Right:
    bytes reduce-scattered per update, per mode."""
    fig = make_subplots(
        rows=1, cols=2, column_widths=[0.62, 0.38], subplot_titles=("gradients held", "reduce-scattered per update")
    )
    for i, (mode, ys) in enumerate(held.items()):
        fig.add_trace(
            go.Scatter(
                x=list(range(len(ys))),
                y=[v / MIB for v in ys],
                mode="lines+markers",
                name=mode,
                line=dict(color=palette(i), shape="hv"),
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            x=list(reduce_scattered),
            y=[v / MIB for v in reduce_scattered.values()],
            marker_color=PALETTE[: len(reduce_scattered)],
            showlegend=False,
        ),
        row=1,
        col=2,
    )
    legend_beside(style(fig, title="Accumulation under FSDP2: memory against traffic", height=440))
    fig.update_xaxes(title_text="micro-steps done", row=1, col=1)
    fig.update_yaxes(title_text="MiB per rank", row=1, col=1)
    return fig


def links(seconds: Mapping[str, Mapping[str, float]]) -> go.Figure:
    """Modelled seconds per update (``{link: {mode: seconds}}``), log scale."""
    title = modelled("One update on each link, collectives overlapping compute (a lower bound)")
    return grouped(seconds, title=title, yaxis="seconds (log)")


def checkpointing(saved: Mapping[str, int]) -> go.Figure:
    """Activation bytes saved for backward by one forward, per setup."""
    return bars(
        {k: v / MIB for k, v in saved.items()},
        title="Activations saved for backward by one forward (measured)",
        yaxis="MiB per rank",
        text_format="{:.2f} MiB",
    )
