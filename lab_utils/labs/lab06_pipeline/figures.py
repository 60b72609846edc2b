"""Lab 6's plotly figures: timelines of real runs, the bubble against its formula, memory, traffic.

from lab_utils.labs.lab06_pipeline import figures
figures.timeline(events_per_stage, title="GPipe, p = 2, m = 4")   # stage x time, by micro-batch
figures.timelines({"GPipe": ev1, "1F1B": ev2})                    # side by side, one row each
figures.work(rows, formula)     # rows: {"piece_ms", "measured", "blocked", "replay", "replay_blocked"[, "flops"]}
figures.bubble(rows)            # rows: {"p", "m", "measured"} (and "replay": free messages)
figures.memory({"GPipe": [b0, b1], "1F1B": [...]})                # bytes in flight per stage
figures.traffic(seconds)        # {link: {"pipeline": s, "DDP": s}} (modelled)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab_utils.labs.lab06_pipeline.records import Event
from lab_utils.labs.lab06_pipeline.timeline import formula
from lab_utils.memory import fmt_bytes
from lab_utils.plots import grouped, legend_beside, level, modelled, palette, style

__all__ = ["timeline", "timelines", "work", "bubble", "memory", "traffic"]


def _traces(events_per_row: Sequence[Iterable[Event]], showlegend: bool, label: str) -> list[go.Bar]:
    rows = [(i, e) for i, row in enumerate(events_per_row) for e in row]
    t0 = min((e.start for _, e in rows), default=0.0)
    traces = []
    for i, e in sorted(rows, key=lambda r: (r[1].kind != "F", r[1].micro_batch, r[0])):
        color = palette(e.micro_batch)
        traces.append(
            go.Bar(
                y=[f"{label} {i}"],
                x=[(e.end - e.start) * 1e3],
                base=[(e.start - t0) * 1e3],
                orientation="h",
                marker=dict(color=color, pattern_shape="" if e.kind == "F" else "/", line=dict(width=1, color="white")),
                text=f"{e.kind}{e.micro_batch}",
                textposition="inside",
                insidetextanchor="middle",
                name=f"micro-batch {e.micro_batch}",
                legendgroup=str(e.micro_batch),
                showlegend=showlegend and e.kind == "F" and i == 0,
                hovertemplate=f"stage {e.stage} {'forward' if e.kind == 'F' else 'backward'} "
                f"micro-batch {e.micro_batch}<br>%{{base:.1f}} ms + %{{x:.1f}} ms<extra></extra>",
            )
        )
    return traces


def timeline(events_per_stage: Sequence[Iterable[Event]], *, title: str = "") -> go.Figure:
    """One step of a real run: a row per stage, a bar per forward (plain) and backward
    (hatched), coloured by micro-batch; the white gaps are the bubble."""
    fig = go.Figure(_traces(events_per_stage, True, "stage"))
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(autorange="reversed")
    return style(fig, title=title or "pipeline timeline (measured)", xaxis="ms since the step began", height=320)


def timelines(runs: Mapping[str, Sequence[Iterable[Event]]]) -> go.Figure:
    """Several timelines (e.g. one per schedule) stacked on a shared time axis, a row per rank
    (a rank may run several stages: the hover text says which)."""
    names = list(runs)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, subplot_titles=names, vertical_spacing=0.12)
    for i, name in enumerate(names, start=1):
        for tr in _traces(runs[name], showlegend=i == 1, label="rank"):
            fig.add_trace(tr, row=i, col=1)
        fig.update_yaxes(autorange="reversed", row=i, col=1)
    fig.update_layout(barmode="overlay")
    style(fig, title="the same step under each schedule (measured)", height=170 + 150 * len(names))
    legend_beside(fig)
    fig.update_xaxes(title_text="ms since the step began", row=len(names), col=1)
    return fig


def work(rows: Sequence[Mapping], formula_value: float) -> go.Figure:
    """Against the work per piece (ms, log axis), one recorded step per point: its idle fraction
    and the part blocked in send / recv (stamped); the same pieces replayed with free messages,
    and the part of that a blocking loop spends in a receive; when rows carry "flops", the idle
    fraction of pieces as long as their FLOPs (the stages' imbalance alone); the formula, dashed."""
    xs = [r["piece_ms"] for r in rows]
    traces = [
        ("measured", "measured idle", "solid", 10, palette(0)),
        ("blocked", "measured: blocked in send / recv", "solid", 8, palette(1)),
        ("replay", "replay, free messages: idle", "dot", 9, palette(2)),
        ("replay_blocked", "replay: in a receive", "dot", 7, palette(3)),
    ]
    if all("flops" in r for r in rows):
        traces.append(("flops", "stages' FLOPs, free messages: idle", "dashdot", 7, palette(4)))
    fig = go.Figure(
        [
            go.Scatter(
                x=xs,
                y=[r[key] for r in rows],
                mode="lines+markers",
                name=name,
                line=dict(dash=dash, color=c),
                marker=dict(size=size, color=c),
            )
            for key, name, dash, size, c in traces
        ]
    )
    fig.add_trace(level(min(xs), max(xs), formula_value, name="(p-1)/(m+p-1)", line=dict(dash="dash", color="gray")))
    fig.update_xaxes(type="log")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    style(
        fig,
        title="idle time against work per micro-batch: measured, replayed, formula",
        xaxis="compute per forward or backward (ms, log)",
        yaxis="idle",
    )
    return legend_beside(fig)


def bubble(rows: Sequence[Mapping]) -> go.Figure:
    """Measured idle fraction (markers), and when rows carry it the same pieces replayed with free
    messages (open markers), against (p - 1) / (m + p - 1) (lines), per p, over m."""
    fig = go.Figure()
    for i, p in enumerate(sorted({r["p"] for r in rows})):
        mine = sorted((r for r in rows if r["p"] == p), key=lambda r: r["m"])
        ms = [r["m"] for r in mine]
        color = palette(i)
        grid = list(range(1, max(ms) + 1))
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=[formula(p, m) for m in grid],
                mode="lines",
                line=dict(color=color, dash="dash"),
                name=f"p = {p}: (p-1)/(m+p-1)",
            )
        )
        if all("replay" in r for r in mine):
            fig.add_trace(
                go.Scatter(
                    x=ms,
                    y=[r["replay"] for r in mine],
                    mode="markers",
                    marker=dict(color=color, size=10, symbol="circle-open", line=dict(width=2)),
                    name=f"p = {p}: replay, free messages",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=ms,
                y=[r["measured"] for r in mine],
                mode="markers",
                marker=dict(color=color, size=11),
                name=f"p = {p}: measured",
            )
        )
    fig.update_xaxes(type="log")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    return style(fig, title="the bubble: idle fraction of the stages", xaxis="micro-batches m (log)", yaxis="idle")


def memory(held: Mapping[str, Sequence[int]]) -> go.Figure:
    """Most activation bytes each stage held for backward at once, per schedule (measured live by
    ``timeline.Recorder``: ``runs.measure``'s ``live_peak``)."""
    fig = go.Figure()
    for i, (name, per_stage) in enumerate(held.items()):
        fig.add_trace(
            go.Bar(
                x=[f"stage {s}" for s in range(len(per_stage))],
                y=[b / 2**20 for b in per_stage],
                text=[fmt_bytes(b) for b in per_stage],
                textposition="auto",
                name=name,
                marker_color=palette(i),
            )
        )
    fig.update_layout(barmode="group")
    return style(
        fig,
        title="activations held for backward, most at once (measured live; checkpointed: before the recompute)",
        yaxis="MiB",
    )


def traffic(seconds: Mapping[str, Mapping[str, float]]) -> go.Figure:
    """Modelled seconds of one step on each link (``{link: {method: seconds}}``), one bar per method."""
    title = modelled("one step, communication overlapping compute")
    return grouped(seconds, title=title, xaxis="link", yaxis="ms (log)", scale=1e3)
