"""The planner against training memory published by others, at 8 and 128 GPUs, gap by gap.

    rows = published.compare()          # one Row per published run
    print(published.table(rows))

The runs (torchtitan team, *Llama 3.1 performance benchmarks*, `benchmarks/llama3_h100_202412_torchtitan.md`,
torchtitan commit 9dec370, December 2024, Tables 1 and 3, row "FSDP"): Llama 3.1 8B, FSDP2 over 8
and over 128 H100 (96 GB), 2 sequences of 8,192 tokens per GPU, selective activation checkpointing
(`selective_ac_option = 'op'` in `llama3_8b.toml`), bf16 mixed precision. Their "Memory (GiB)" is
the peak torchtitan logs as `memory:`, `torch.cuda.max_memory_reserved` (the caching allocator's
reserve, `torchtitan/components/metrics.py`), not the allocated peak the planner predicts.

Three differences of layout are computed from the two codes, not measured (a *model*):
torchtitan's op policy saves the outputs of every other matmul and of attention, in bf16, where the
planner's selective policy saves six of the seven matmuls' (all but ``down_proj``'s) and the
layer's fp32 input; FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)`` gathers bf16 weights (and
computes the unsharded gradients in bf16) where the planner holds both in fp32, so about half; and
no autocast keeps a bf16 copy of the head. What remains is the allocator's reserve above
the allocated peak, and what the model leaves out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lab_utils import plan
from lab_utils.memory import stepmem

__all__ = ["Published", "PUBLISHED", "Row", "torchtitan_layer_bytes", "layout_gaps", "compare", "table", "drop"]

GiB = 2**30
SOURCE = (
    "torchtitan team, Llama 3.1 performance benchmarks, benchmarks/llama3_h100_202412_torchtitan.md "
    "(torchtitan 9dec370, 2024-12-26), Tables 1 and 3, row FSDP"
)


@dataclass(frozen=True)
class Published:
    """One published run: its GPUs, sequences per GPU, sequence length and the peak it reports (GiB)."""

    label: str
    gpus: int
    local_batch: int
    seq: int
    gib: float
    figure: str = "max_memory_reserved"


PUBLISHED = (
    Published("torchtitan Table 1", gpus=8, local_batch=2, seq=8192, gib=82.4),
    Published("torchtitan Table 3", gpus=128, local_batch=2, seq=8192, gib=67.0),
)


@dataclass(frozen=True)
class Row:
    run: Published
    planner: plan.Memory  # the planner's FSDP + selective plan, per device
    gaps: dict[str, int]  # the layout differences (bytes, negative: torchtitan keeps less)

    @property
    def adjusted(self) -> int:
        return self.planner.peak + sum(self.gaps.values())

    @property
    def published(self) -> int:
        return int(self.run.gib * GiB)


def _request(run: Published) -> tuple[stepmem.Shape, plan.Hardware]:
    return plan.request(
        "llama-3-8b", batch=run.local_batch * run.gpus, seq=run.seq, devices=run.gpus, memory="96GB", link="400Gb"
    )


def torchtitan_layer_bytes(s: stepmem.Shape, b: int) -> int:
    """What torchtitan's op policy keeps per layer on ``b`` sequences (read from its
    ``_apply_ac_to_transformer_block``): the layer's bf16 input; the outputs of the 1st, 3rd, 5th
    and 7th of its seven matmuls (wq, wv, w1, w2; "every second mm" is recomputed) and of
    attention, in bf16, with attention's fp32 log-sum-exp."""
    u, c, r = b * s.seq * s.hidden, s.compute_bytes, s.n_kv_heads / s.heads
    saved = u + u * r + u * s.ffn_size / s.hidden + u  # wq, wv, w1, w2
    return int(u * c + (saved + u) * c + b * s.heads * s.seq * 4)


def layout_gaps(s: stepmem.Shape, b: int, planner: plan.Memory) -> dict[str, int]:
    """Bytes by which torchtitan's layout keeps less than the planner's FSDP + selective plan, by part."""
    selective = plan.cost._selective_layer_bytes(s, b)
    return {
        "op policy (bf16, every other mm)": -s.layers * (selective - torchtitan_layer_bytes(s, b)),
        "FSDP2 gathers bf16": -planner.gathered // 2,
        "no autocast head copy": -s.compute_bytes * s.vocab * s.hidden,
    }


def compare(runs: tuple[Published, ...] = PUBLISHED) -> list[Row]:
    """The planner's FSDP plan with selective checkpointing for each published run, and its gaps."""
    rows = []
    for run in runs:
        s, hw = _request(run)
        mem = plan.evaluate(s, hw, plan.Strategy("fsdp", "selective")).memory
        rows.append(Row(run, mem, layout_gaps(dataclasses.replace(s, batch=run.local_batch), run.local_batch, mem)))
    return rows


def drop(rows: list[Row]) -> tuple[float, float]:
    """(planner, published) GiB that the peak falls from the fewest GPUs to the most."""
    a, b = rows[0], rows[-1]
    return (a.planner.peak - b.planner.peak) / GiB, a.run.gib - b.run.gib


def table(rows: list[Row]) -> str:
    """One column per published run: the planner's parts, the layout gaps, and what remains."""
    lines = [f"{'GiB per GPU':<40}" + "".join(f"{r.run.gpus:>9} GPUs" for r in rows)]

    def line(label: str, values) -> None:
        lines.append(f"{label:<40}" + "".join(f"{v / GiB:>14.1f}" for v in values))

    line(
        "planner: weights, gradients, AdamW",
        [r.planner.weights + r.planner.gradients + r.planner.optimizer for r in rows],
    )
    line("planner: activations", [r.planner.activations for r in rows])
    line("planner: temporaries (loss)", [r.planner.temporaries for r in rows])
    line("planner: gathered by FSDP", [r.planner.gathered for r in rows])
    line("planner: peak (allocated)", [r.planner.peak for r in rows])
    for name in rows[0].gaps:
        line(f"model: {name}", [r.gaps[name] for r in rows])
    line("model: in torchtitan's layout", [r.adjusted for r in rows])
    line("published: max_memory_reserved", [r.published for r in rows])
    line("left: allocator reserve, other", [r.published - r.adjusted for r in rows])
    return "\n".join(lines)
