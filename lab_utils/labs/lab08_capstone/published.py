"""The planner against training memory published by others, at 8 and 128 GPUs, gap by gap.

    rows = published.compare()          # one Row per published run
    print(published.table(rows))

The runs (torchtitan team, *Llama 3.1 performance benchmarks*, `benchmarks/llama3_h100_202412_torchtitan.md`,
torchtitan commit 9dec370, December 2024, Tables 1 and 3, row "FSDP": Llama 3.1 8B, FSDP over 8 and
over 128 H100 of 96 GB, local batch size 2, selective activation checkpointing, 5,762 and 5,605
tokens/s per GPU). The rest is read from torchtitan at 9dec370, not from the tables: 8,192 tokens
per sequence and ``selective_ac_option = 'op'`` from ``train_configs/llama3_8b.toml`` (whose
``batch_size = 1`` the runs overrode with 2: we assume they kept the rest), FSDP2 with
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` (the defaults of
``torchtitan/config_manager.py``). Their "Memory (GiB)" we take to be the ``memory:`` that
``train.py`` logs (line 393), ``reserved_bytes.all.peak`` (``torchtitan/metrics.py``, lines
55-64), i.e. ``torch.cuda.max_memory_reserved``: the caching allocator's reserve, not the allocated
peak the planner predicts (an inference: the tables do not name their meter).

Three differences of layout are computed from the two codes, not measured (a *model*). Two replace
the planner's own terms by a count of torchtitan's, so the comparison does NOT test them: the
layers' activations (``torchtitan_layer_bytes``: its op policy saves the outputs of every other
matmul and of attention, in bf16, where the planner's selective policy saves six of the seven
matmuls' and the layer's fp32 input) and the head's autocast copy (no autocast in torchtitan).
The third scales the planner's FSDP term: FSDP2 gathers bf16 parameters (half the planner's fp32)
and holds the current layer's gradient in bf16 plus its fp32 reduce-scatter input (6 bytes per
parameter, not 4). What the comparison tests is the rest of the planner: the sharded state, the
activations outside the layers (the fp32 logits), the loss's temporaries and FSDP's gathers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lab_utils import plan
from lab_utils.memory import stepmem

__all__ = [
    "Published",
    "PUBLISHED",
    "Row",
    "torchtitan_layer_bytes",
    "layout_gaps",
    "compare",
    "table",
    "throughput",
    "drop",
]

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
    tokens_per_s: int  # TPS/GPU, as published
    figure: str = "max_memory_reserved"


PUBLISHED = (
    Published("torchtitan Table 1", gpus=8, local_batch=2, seq=8192, gib=82.4, tokens_per_s=5762),
    Published("torchtitan Table 3", gpus=128, local_batch=2, seq=8192, gib=67.0, tokens_per_s=5605),
)


@dataclass(frozen=True)
class Row:
    run: Published
    planner: plan.Memory  # the planner's FSDP + selective plan, per device
    gaps: dict[str, int]  # the layout differences (bytes, negative: torchtitan keeps less)
    seconds: float = 0.0  # the planner's seconds per update
    flops_per_token: float = 0.0  # the planner's FLOPs per token, recompute included

    @property
    def tokens_per_s(self) -> float:
        """The planner's tokens per second per GPU."""
        return self.run.local_batch * self.run.seq / self.seconds

    @property
    def published_tflops(self) -> float:
        """The TFLOP/s per GPU the published throughput implies, at the planner's FLOPs per token."""
        return self.run.tokens_per_s * self.flops_per_token / 1e12

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
    """Bytes by which torchtitan's layout keeps less than the planner's FSDP + selective plan, by
    part. The first and last replace the planner's terms by torchtitan's (the planner's cancel);
    the second halves the planner's gathered parameters and counts the current layer's gradient
    at 2 + 4 bytes per parameter (bf16, then FSDP2's fp32 reduce-scatter input)."""
    selective = plan.cost._selective_layer_bytes(s, b)
    grad = stepmem.layer_parameters(s) * s.dtype_bytes  # the planner's current layer's gradient
    return {
        "layers: torchtitan's op policy": -s.layers * (selective - torchtitan_layer_bytes(s, b)),
        "FSDP2 bf16 gathers, fp32 reduce": -(planner.gathered - grad) // 2 + (2 + 4) * grad // 4 - grad,
        "no autocast head copy": -s.compute_bytes * s.vocab * s.hidden,
    }


def compare(runs: tuple[Published, ...] = PUBLISHED) -> list[Row]:
    """The planner's FSDP plan with selective checkpointing for each published run, and its gaps."""
    rows = []
    for run in runs:
        s, hw = _request(run)
        p = plan.evaluate(s, hw, plan.Strategy("fsdp", "selective"))
        flops = plan.cost.update_flops(s, False) * (1 + plan.cost.SELECTIVE_OVERHEAD) / (s.batch * s.seq)
        gaps = layout_gaps(dataclasses.replace(s, batch=run.local_batch), run.local_batch, p.memory)
        rows.append(Row(run, p.memory, gaps, p.seconds, flops))
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


def throughput(rows: list[Row]) -> str:
    """The planner's tokens/s per GPU beside the published, and the TFLOP/s the published imply."""
    lines = [f"{'tokens/s per GPU':<40}" + "".join(f"{r.run.gpus:>9} GPUs" for r in rows)]
    lines.append(f"{'planner, at its assumed TFLOP/s':<40}" + "".join(f"{r.tokens_per_s:>14,.0f}" for r in rows))
    lines.append(f"{'published':<40}" + "".join(f"{r.run.tokens_per_s:>14,}" for r in rows))
    lines.append(f"{'published x planner FLOPs: TFLOP/s':<40}" + "".join(f"{r.published_tflops:>14.0f}" for r in rows))
    return "\n".join(lines)
