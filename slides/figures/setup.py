"""Lab 0 figures: real ranks started from Python, as the setup check does."""

from __future__ import annotations

import plotly.graph_objects as go

from figures import figure


@figure("setup.allreduce")
def allreduce() -> go.Figure:
    """Start 2 and 3 real processes, all-reduce rank+1 on each: the sum every rank received,
    next to the sum it must be, and the seconds the whole launch took."""
    import torch
    import torch.distributed as dist

    import lab_utils
    from lab_utils.plots import PALETTE, style

    def contribute_and_sum():  # nested: sent to the ranks by value
        t = torch.tensor([dist.get_rank() + 1.0])
        dist.all_reduce(t)
        return t.item()

    fig = go.Figure()
    for i, world in enumerate((2, 3)):
        out = lab_utils.launch(contribute_and_sum, world)
        expected = world * (world + 1) / 2
        if any(s != expected for s in out):
            raise AssertionError(f"{world} ranks returned {list(out)}, expected {expected} on each")
        fig.add_trace(
            go.Bar(
                x=[f"rank {r}" for r in range(world)],
                y=list(out),
                name=f"{world} ranks, {out.backend}, {out.seconds:.1f} s",
                marker_color=PALETTE[i],
                text=[f"{s:g}" for s in out],
                textposition="auto",
            )
        )
        fig.add_hline(
            y=expected, line_dash="dot", annotation_text=f"1+...+{world} = {expected:g}", annotation_position="top left"
        )
    style(fig, title="all_reduce(rank + 1) on real processes: every rank gets the sum", yaxis="value after all_reduce")
    fig.update_layout(barmode="group")
    return fig
