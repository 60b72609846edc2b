"""The plan as a person reads it: a table of predicted memory and time per strategy, the models
behind each number with their measured error, and a figure."""

from __future__ import annotations

from collections.abc import Sequence

from lab_utils.memory import fmt_bytes
from lab_utils.plan.cost import Plan
from lab_utils.plan.inputs import Hardware

__all__ = ["MODELS", "table", "best_per_family", "figure", "legend"]

# What each number rests on: the lab that validated the model and the error it measured there.
MODELS: dict[str, str] = {
    "memory": "stepmem, labs 1 and 8: Llama-style decoders' peak within 4 % of the meters on shapes the fit "
    "never saw; a real CPU step's process peak (VmHWM) at 125 M parameters -0.4 % (fp32) and -0.2 % (bf16); "
    "BERT-large's shape within 0.3 % (lab 1); on GPUs not yet compared",
    "sharding": "ZeRO-1/2/FSDP bytes per rank, lab 7: equal to the bytes measured on its ranks; every plan keeps "
    "the autocast layout (AdamW: 4 + 4 + 8 bytes per parameter, fp32 weights and gradients outside the optimizer, "
    "as torch.autocast and the HF Trainer's bf16=True keep them), not ZeRO's paper layout (2 + 2 + 12: 16-bit "
    "weights and gradients, the fp32 master in the optimizer), whose ZeRO-1/2 keep less (cost.zero_state)",
    "pipeline": "1F1B in flight p - s and the bubble (p - 1)/(m + p - 1), lab 6: the recorded order matches "
    "it exactly; the measured wall-clock bubble is near it",
    "selective/offload": "lab 1's policies restated for these models, not measured on them; selective's "
    "recompute assumed 4 % of the compute; offload's two copies per byte at 25 GB/s, not overlapped (lab 1)",
    "time": "overlap model, lab 3: on a real shaped link 12 of 18 points within 10 % (worst 15 %) with its "
    "measured contention term, which this plan does not apply (worst 31 % without it); "
    "FSDP's traffic 1.5 x DDP's (lab 7, counted exactly); "
    "local SGD averages once every H updates (lab 5: it changes the loss curve)",
    "compute": "an assumption, not a measurement: FLOPs / the sustained TFLOP/s given (--tflops)",
}


def legend(hw: Hardware) -> str:
    """The lines that say what every number is."""
    lines = [
        f"All numbers are PREDICTED for {hw.devices} device(s) of {fmt_bytes(hw.memory)}, link {hw.link.name} "
        f"({hw.link.bandwidth_Bps * 8 / 1e9:g} Gbit/s, {hw.link.latency_s * 1e6:g} us), {hw.tflops:g} TFLOP/s "
        "sustained per device (assumed)."
    ]
    if hw.memory_note:
        lines.append(f"  {hw.memory_note}")
    lines += [f"  {k}: {v}" for k, v in MODELS.items()]
    return "\n".join(lines)


def _row(p: Plan) -> str:
    m = p.memory
    return (
        f"{p.strategy.name:<44}{fmt_bytes(m.peak):>11}{fmt_bytes(m.weights + m.gradients + m.optimizer):>11}"
        f"{fmt_bytes(m.activations):>11}{fmt_bytes(m.temporaries + m.gathered):>11}"
        f"{p.seconds:>10.3f}{p.comm_s:>9.3f}  {'fits' if p.fits else 'too big'}"
    )


HEADER = (
    f"{'strategy (predicted)':<44}{'peak':>11}{'w+g+opt':>11}{'activ.':>11}{'temp.':>11}{'s/update':>10}{'idle':>9}"
)


def best_per_family(plans: Sequence[Plan]) -> list[Plan]:
    """For each parallelism and checkpointing, the first plan of ``plans`` (which are ranked)."""
    seen, out = set(), []
    for p in plans:
        key = (p.strategy.parallel, p.strategy.h, p.strategy.stages, p.strategy.checkpointing)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def table(plans: Sequence[Plan], *, top: int | None = None) -> str:
    """Fixed-width rows: predicted peak per device (and its parts), seconds per update."""
    return "\n".join([HEADER] + [_row(p) for p in list(plans)[: top or None]])


def figure(plans: Sequence[Plan], hw: Hardware, *, title: str = ""):
    """Predicted peak per device (stacked parts) and seconds per update of the given plans, with
    the device's memory as a line (plotly)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [p.strategy.name for p in plans]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("predicted peak per device (GiB)", "predicted s / update"))
    for part in ("weights", "gradients", "optimizer", "activations", "temporaries", "gathered"):
        fig.add_trace(
            go.Bar(y=names, x=[p.memory.parts()[part] / 2**30 for p in plans], name=part, orientation="h"), 1, 1
        )
    fig.add_vline(x=hw.memory / 2**30, line_dash="dash", row=1, col=1, annotation_text="device memory")
    fig.add_trace(
        go.Bar(y=names, x=[p.seconds for p in plans], orientation="h", name="s / update", showlegend=False), 1, 2
    )
    fig.update_layout(barmode="stack", title=title or "The plan (every number predicted)", height=120 + 26 * len(plans))
    fig.update_yaxes(autorange="reversed")
    return fig
