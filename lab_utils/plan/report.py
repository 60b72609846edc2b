"""The plan as a person reads it: a table of predicted memory and time per strategy, the models
behind each number with their measured error, and a figure."""

from __future__ import annotations

from collections.abc import Sequence

from lab_utils.memory import fmt_bytes, stepmem
from lab_utils.plan.cost import Plan
from lab_utils.plan.inputs import Hardware

__all__ = ["MODELS", "SHORT", "table", "best_per_family", "figure", "legend", "left_out"]

# What each number rests on: the lab that compared the model with a measurement, and the error it found.
MODELS: dict[str, str] = {
    "memory": "stepmem, labs 1 and 8: a Llama step on a CPU, fp32 and under bf16 autocast, its activations within "
    "1 % and its peak within 5 % of the meters (lab 8's checks; the temporaries are a model fitted on small shapes "
    "and checked on others); GPT-2 and BERT shapes against the meters in the tests; on GPUs not yet compared by a "
    "run of ours; at scale, "
    "torchtitan's published Llama 3.1 8B FSDP runs on 8 and 128 H100 (reserved peaks 82.4 and 67.0 GiB): "
    "this plan is 16 and 17 GiB above them; with a count of torchtitan's layer policy in place of "
    "stepmem's layers (so no test of those) and FSDP2's bf16 gathers, the planner's state, logits, loss and "
    "gather terms sit 9 % under them (lab 8, Going further)",
    "sharding": "ZeRO-1/2/FSDP bytes per rank, lab 7: equal to the bytes measured on its ranks; every plan keeps "
    "the autocast layout (AdamW: 4 + 4 + 8 bytes per parameter, fp32 weights and gradients outside the optimizer, "
    "as torch.autocast and the HF Trainer's bf16=True keep them), not ZeRO's paper layout (2 + 2 + 12: 16-bit "
    "weights and gradients, the fp32 master in the optimizer), whose ZeRO-1/2 keep less (cost.zero_state)",
    "pipeline": "1F1B in flight p - s and the bubble (p - 1)/(m + p - 1), lab 6: the recorded order matches "
    "it exactly; the wall-clock bubble measured on 2 CPU cores is larger (stage imbalance, messages)",
    "ddp-every-step": "DDP without no_sync: it all-reduces the gradients after every micro-batch, not once per "
    "update (lab 3's naive loop); with K=1 it is ddp, and rows equal to one above are left out",
    "selective/offload": "lab 1's policies restated for these models, not measured on them; selective's "
    "recompute assumed 4 % of the compute; offload's two copies per byte at 25 GB/s, not overlapped (lab 1)",
    "time": "overlap model, lab 3: compared with a real shaped link (2 CPU ranks; every stored run, and runs "
    "predicted from another run's link and contention), it predicts too little on average, not at every point, "
    "so these times likely underestimate the naive loop's cost (not a bound; other rank counts untested), and "
    "this plan does not apply the measured contention term; "
    "FSDP's traffic 1.5 x DDP's (lab 7, counted exactly); "
    "local SGD averages once every H updates (lab 5: it changes the loss curve)",
    "compute": "an assumption, not a measurement: FLOPs / the sustained TFLOP/s given (--tflops), at the same rate "
    "for any micro-batch, so K micro-batches (accumulation, a pipeline's m) cost no more than one large one and "
    "plans that differ only in K tie (the fewer micro-batches first); a GPU runs small matmuls at a lower rate. "
    "Checkpointing replays each layer's forward but its last matmul (early stop, counted on a real step)",
}


# The same, one short line each (a notebook's printout); ``legend(hw)`` gives them in full.
SHORT: dict[str, str] = {
    "memory": "stepmem: a CPU step's activations within 1 %, its peak within 5 % (lab 8); GPUs untested",
    "sharding": "ZeRO-1/2/FSDP bytes per rank as counted on lab 7's ranks, in the autocast layout",
    "pipeline": "1F1B in flight and the fill-drain bubble (lab 6's recorded order); wall clocks idle more",
    "ddp-every-step": "the naive loop: an all-reduce after every micro-batch (lab 3)",
    "selective/offload": "lab 1's policies restated for these models, not measured on them",
    "time": "lab 3's overlap model, low on average against a real link (a likely underestimate)",
    "compute": "FLOPs / the TFLOP/s given: an assumption, not a measurement",
}


def legend(hw: Hardware, *, short: bool = False) -> str:
    """The lines that say what every number is (``short``: one line per model, ``SHORT``)."""
    lines = [
        f"All numbers are PREDICTED for {hw.devices} device(s) of {fmt_bytes(hw.memory)}, link {hw.link.name} "
        f"({hw.link.bandwidth_Bps * 8 / 1e9:g} Gbit/s, {hw.link.latency_s * 1e6:g} us), {hw.tflops:g} TFLOP/s "
        "sustained per device (assumed)."
    ]
    if hw.memory_note:
        lines.append(f"  {hw.memory_note}")
    lines += [f"  {k}: {v}" for k, v in (SHORT if short else MODELS).items()]
    if short:
        lines.append("  (each in full, with its measured error: plan.report.legend(hw))")
    return "\n".join(lines)


def left_out(s: stepmem.Shape) -> str:
    """What no number above includes, each with its size for ``s`` where the models give one (per
    device), so a reader can add it: the planner's peaks are below what a GPU run needs."""
    n, e = stepmem.parameters(s), s.dtype_bytes
    copies = stepmem.layer_parameters(s) - 2 * s.hidden
    copies = s.compute_bytes * s.layers * copies if s.precision == "bf16" else 0
    logits = 3 * s.seq * s.vocab * 4 if s.arch != "bert" else 0
    lines = [
        "Left out of every number above (add what applies to yours):",
        "  tensor, sequence and context parallelism: not planned; TP + SP divide each layer's weights and "
        "activations by t (Korthikanti et al. 2022), CP splits a sequence: plan them when one layer or one "
        "sequence does not fit a device",
        f"  DDP's gradient buckets: the ddp rows assume gradient_as_bucket_view=True; torch's default (False) "
        f"keeps a bucket copy of every gradient: +{fmt_bytes(n * e)} per device (lab 3 measures it)",
    ]
    if copies:
        lines.append(
            f"  autocast's weight-copy cache: with checkpointing every layer's bf16 copy stays cached until autocast "
            f"exits after the forward: +{fmt_bytes(copies)} per device then (torch.autocast(cache_enabled=False) "
            "or FSDP's MixedPrecisionPolicy avoid it)"
        )
    if logits:
        lines.append(
            f"  the loss as transformers computes it: fp32 logits, kept and twice at its backward, "
            f"{fmt_bytes(logits)} per sequence of a micro-batch (in the peaks above); a chunked or fused "
            "cross-entropy keeps a fraction of it"
        )
    if s.arch == "llama" and s.n_kv_heads < s.heads:
        r = s.n_kv_heads / s.heads
        repeat = int(s.layers * 2 * (1 - r) * s.seq * s.hidden * s.compute_bytes)
        lines.append(
            f"  a padding mask: with one, transformers' sdpa repeats k and v to every query head (repeat_kv) and "
            f"backward keeps them: +{fmt_bytes(repeat)} per sequence of a micro-batch without checkpointing"
        )
        if s.precision == "fp32":
            probs = s.layers * s.heads * s.seq**2 * 4
            lines.append(
                f"  fp32 with grouped-query attention on CUDA: with no mask transformers passes enable_gqa=True, which "
                f"only the flash (16-bit only) and math kernels take, so fp32 runs the math kernel and keeps the "
                f"attention probabilities: at least +{fmt_bytes(probs)} per sequence of a micro-batch without "
                "checkpointing (one layer's share with it); use bf16"
            )
    lines += [
        f"  gradients stay allocated between steps (zero_grad(set_to_none=False)); torch's default frees them, "
        f"{fmt_bytes(n * e)} per device less (unsharded) until the next backward",
        "  the optimizer is torch's default AdamW (foreach: one fp32 buffer of the parameters it steps); fused=True "
        "keeps none",
        "  the CUDA context (about 1.3 GB per process), NCCL's buffers (NCCL_BUFFSIZE, 4 MiB by default, per "
        "channel and peer: tens to hundreds of MiB) and the caching allocator's reserve and fragmentation (lab 1: "
        "the HF guide's published bert-large runs sat 2-12 % above the calculator plus the context)",
        "  time: small micro-batches' lower efficiency, the optimizer step, a hierarchical network, and the "
        "contention lab 3 measured between transfers and the backward",
    ]
    return "\n".join(lines)


def _row(p: Plan, devices: int | None = None) -> str:
    m = p.memory
    name = p.strategy.name
    if devices == 1 and p.strategy.parallel == "ddp":  # nothing to all-reduce with
        name = "one device" + name[len("ddp") :]
    return (
        f"{name:<44}{fmt_bytes(m.peak):>11}{fmt_bytes(m.weights + m.gradients + m.optimizer):>11}"
        f"{fmt_bytes(m.activations):>11}{fmt_bytes(m.temporaries + m.gathered):>13}"
        f"{p.seconds:>10.3f}{p.comm_s:>11.3f}  {'fits' if p.fits else 'too big'}"
    )


HEADER = (
    f"{'strategy (predicted)':<44}{'peak':>11}{'w+g+opt':>11}{'activ.':>11}{'temp.+gath.':>13}{'s/update':>10}"
    f"{'comm+idle':>11}"
)


def best_per_family(plans: Sequence[Plan]) -> list[Plan]:
    """For each parallelism and checkpointing, the first plan of ``plans`` (which are ranked); a
    plan whose numbers equal a plan already kept (ddp-every-step at K=1 is ddp) is left out."""
    seen, numbers, out = set(), set(), []
    for p in plans:
        key = (p.strategy.parallel, p.strategy.h, p.strategy.stages, p.strategy.checkpointing)
        same = (p.strategy.checkpointing, p.strategy.accumulation, p.memory.peak, p.seconds, p.comm_s)
        if key not in seen:
            seen.add(key)
            if same not in numbers:
                numbers.add(same)
                out.append(p)
    return out


def table(plans: Sequence[Plan], *, top: int | None = None, devices: int | None = None) -> str:
    """Fixed-width rows: predicted peak per device (and its parts), seconds per update and the part
    of them not spent computing (exposed communication and a pipeline's bubble); with ``devices``
    1, the ddp rows are labelled "one device"."""
    return "\n".join([HEADER] + [_row(p, devices) for p in list(plans)[: top or None]])


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
