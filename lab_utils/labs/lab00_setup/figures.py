"""Lab 0's figure: what every rank holds after an all-reduce, next to what it must hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from lab_utils.plots import palette, style

__all__ = ["allreduce"]


def allreduce(results: Mapping[int, Sequence[float]], *, labels: Mapping[int, str] | None = None) -> go.Figure:
    """Bars of the value each rank returned, one group per world size, with the expected sum
    1 + ... + world drawn as a dotted line. ``labels`` adds a legend note per world size."""
    fig = go.Figure()
    for i, (world, values) in enumerate(results.items()):
        note = f", {labels[world]}" if labels and world in labels else ""
        fig.add_trace(
            go.Bar(
                x=[f"rank {r}" for r in range(len(values))],
                y=list(values),
                name=f"{world} ranks{note}",
                marker_color=palette(i),
                text=[f"{v:g}" for v in values],
                textposition="auto",
            )
        )
        expected = world * (world + 1) / 2
        fig.add_hline(
            y=expected, line_dash="dot", annotation_text=f"1+...+{world} = {expected:g}", annotation_position="top left"
        )
    style(fig, title="all_reduce(rank + 1) on real processes: every rank gets the sum", yaxis="value after all_reduce")
    fig.update_layout(barmode="group")
    return fig
