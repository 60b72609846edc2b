"""Graders of lab 8's exercises: a small Llama-style decoder run on this CPU, its measurement
compared with the student's prediction or plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from lab_utils.checks import grader
from lab_utils.labs.lab08_capstone import measure
from lab_utils.memory import SavedTensorMeter, fmt_bytes, stepmem

__all__ = ["check_weight_copies", "check_cheapest_fit", "check_scale_down", "SHAPES", "CPU_BUDGET"]

# Token counts (batch x seq) that equal no weight dimension, so saved weight copies are told
# apart from activations by shape.
SHAPES = [
    stepmem.Shape(arch="llama", layers=2, hidden=48, heads=4, kv_heads=2, ffn=136, vocab=200, positions=64,
                  seq=17, batch=3, attention="sdpa", precision="bf16"),
    stepmem.Shape(arch="llama", layers=3, hidden=64, heads=8, kv_heads=8, ffn=176, vocab=300, positions=64,
                  seq=19, batch=2, attention="sdpa", precision="bf16", tied=True),
]  # fmt: skip
CPU_BUDGET = 64 * 2**20  # a scaled-down plan must fit this on the CPU (predicted peak)


def measured_weight_copies(shape: stepmem.Shape) -> int:
    """Bytes of bf16 tensors shaped like a weight (or its transpose) that one autocast forward
    keeps for backward: autocast's copies of the weights, measured."""
    model, batch = measure.build(shape)
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    shapes |= {s[::-1] for s in shapes}
    with SavedTensorMeter(model, exclude=list(batch.values())) as meter:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**batch).loss
    del loss
    return sum(r.nbytes for r in meter.records if r.dtype == torch.bfloat16 and r.shape in shapes)


@grader(
    "plan-copies",
    "autocast's weight copies",
    hint="reread section 1: under bf16 autocast every matmul's weight gets a bf16 copy (2 bytes per "
    "parameter) that backward keeps: the q, k, v, o projections, SwiGLU's three and the head; the "
    "embedding is a lookup and the RMSNorms run in fp32, so they get none; a tied head shares the "
    "embedding's matrix but is still a matmul",
)
def check_weight_copies(bf16_weight_copies: Callable[[stepmem.Shape], int]) -> str:
    for s in SHAPES:
        got, want = bf16_weight_copies(s), measured_weight_copies(s)
        assert got == want, (
            f"for {s.layers} layers, hidden {s.hidden}, {s.heads} heads / {s.n_kv_heads} kv, ffn {s.ffn}, vocab "
            f"{s.vocab}{', tied head' if s.tied else ''}: you predict {got:,} bytes, the meter measures {want:,}"
        )
    return f"{len(SHAPES)} shapes, your prediction equals the bytes measured"


FIT_SHAPE = stepmem.Shape(
    arch="llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=176, vocab=500, positions=64, seq=64, batch=8,
    attention="sdpa",
)  # fmt: skip
FIT_BUDGET = 6 * 2**20


def reference_fit(shape: stepmem.Shape, budget: int) -> tuple[int, bool]:
    """The fewest micro-batches without checkpointing whose predicted peak fits, else with it."""
    for ckpt in (False, True):
        for k in (k for k in range(1, shape.batch + 1) if shape.batch % k == 0):
            if stepmem.predict(dataclasses.replace(shape, accumulation=k, checkpointing=ckpt)).peak <= budget:
                return k, ckpt
    raise ValueError(f"nothing fits {budget} bytes")


@grader(
    "plan-fit",
    "the cheapest plan that fits one device",
    hint="reread section 2: try accumulation K = 1, 2, 4, ... (each dividing the batch) without "
    "checkpointing first, and switch checkpointing on only if no K fits; compare the whole predicted "
    "peak (temporaries included) with the budget",
)
def check_cheapest_fit(cheapest_fit: Callable[[stepmem.Shape, int], tuple[int, bool]]) -> str:
    k, ckpt = cheapest_fit(FIT_SHAPE, FIT_BUDGET)
    assert isinstance(k, int) and FIT_SHAPE.batch % k == 0, f"K={k!r} does not divide the batch of {FIT_SHAPE.batch}"
    chosen = dataclasses.replace(FIT_SHAPE, accumulation=k, checkpointing=bool(ckpt))
    got = measure.step_parts(chosen)
    want_k, want_ckpt = reference_fit(FIT_SHAPE, FIT_BUDGET)
    assert got.peak <= FIT_BUDGET, (
        f"K={k}, checkpointing={bool(ckpt)}: measured peak {fmt_bytes(got.peak)} is over the budget of "
        f"{fmt_bytes(FIT_BUDGET)}"
    )
    assert (k, bool(ckpt)) == (want_k, want_ckpt), (
        f"K={k}, checkpointing={bool(ckpt)} fits (measured {fmt_bytes(got.peak)}), but K={want_k}, "
        f"checkpointing={want_ckpt} fits too and costs less (fewer micro-batches, less recompute)"
    )
    pred = stepmem.predict(chosen).peak
    return f"K={k}, checkpointing={bool(ckpt)}: measured {fmt_bytes(got.peak)}, predicted {fmt_bytes(pred)}"


@grader(
    "plan-scale",
    "your plan, scaled down to this CPU",
    hint="reread section 4: keep the architecture, precision, heads and key/value heads (so the ratio of "
    "grouped-query attention stays), keep FFN / hidden; divide hidden (by a factor that keeps it a multiple "
    "of heads), layers and vocabulary until the predicted peak fits the CPU budget",
)
def check_scale_down(scale_down: Callable[[stepmem.Shape], stepmem.Shape], big: stepmem.Shape) -> str:
    small = scale_down(big)
    assert isinstance(small, stepmem.Shape), f"scale_down returned {type(small).__name__}, not a stepmem.Shape"
    same = ("arch", "precision", "heads", "kv_heads", "optimizer", "tied")
    changed = [f for f in same if getattr(small, f) != getattr(big, f)]
    assert not changed, f"scale_down changed {changed}: a scaled-down plan keeps them"
    ratio = small.ffn_size / small.hidden, big.ffn_size / big.hidden
    assert abs(ratio[0] - ratio[1]) <= 0.1 * ratio[1], f"FFN / hidden went from {ratio[1]:.2f} to {ratio[0]:.2f}"
    pred = stepmem.predict(small)
    assert pred.peak <= CPU_BUDGET, (
        f"predicted peak {fmt_bytes(pred.peak)}: over the CPU budget {fmt_bytes(CPU_BUDGET)}"
    )
    got = measure.step_parts(small)
    err = (pred.peak - got.peak) / got.peak
    assert abs(err) <= 0.05, f"measured {fmt_bytes(got.peak)}, predicted {fmt_bytes(pred.peak)} ({err:+.1%})"
    return f"{stepmem.parameters(small) / 1e6:.2f} M parameters: measured peak within 5 % of the prediction"
