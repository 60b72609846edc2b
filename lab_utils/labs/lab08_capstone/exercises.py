"""Graders of lab 8's exercises: a small model run on this CPU, its measurement compared with the
student's prediction or plan. A shape that cannot run is refused before it runs, with what is wrong
with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from lab_utils.checks import grader
from lab_utils.labs.lab08_capstone import measure
from lab_utils.memory import SavedTensorMeter, fmt_bytes, stepmem

__all__ = ["check_weight_copies", "check_cheapest_fit", "check_scale_down", "SHAPES", "FIT_CASES", "CPU_BUDGET"]

# Token counts (batch x seq) that equal no weight dimension, so saved weight copies are told
# apart from activations by shape.
SHAPES = [
    stepmem.Shape(arch="llama", layers=2, hidden=48, heads=4, kv_heads=2, ffn=136, vocab=200, positions=64,
                  seq=17, batch=3, attention="sdpa", precision="bf16"),
    stepmem.Shape(arch="llama", layers=3, hidden=64, heads=8, kv_heads=8, ffn=176, vocab=300, positions=64,
                  seq=19, batch=2, attention="sdpa", precision="bf16", tied=True),
    # kv_heads=0 and ffn=0 mean "as many as heads" and "4 x hidden": read s.n_kv_heads and s.ffn_size
    stepmem.Shape(arch="llama", layers=2, hidden=32, heads=4, kv_heads=0, ffn=0, vocab=100, positions=64,
                  seq=13, batch=3, attention="sdpa", precision="bf16"),
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
    todo="reread section 1 (autocast's weight copies)",
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
# Cases where the plausible wrong rules part (predicted peaks in section 2's table): at 6 MiB K=4 fits
# without checkpointing and K=2 with it (checkpointing first, or the fewest K either way, or the
# largest K, are wrong); at 3.2 MiB only checkpointing fits (K=8; a search that never tries it has
# no answer); at batch 12 and 7 MiB K=3 fits (a search over K = 1, 2, 4, 8 only picks 4).
FIT_CASES = [
    (FIT_SHAPE, FIT_BUDGET),
    (FIT_SHAPE, int(3.2 * 2**20)),
    (dataclasses.replace(FIT_SHAPE, batch=12), 7 * 2**20),
]
NO_FIT = 2**20  # nothing fits: cheapest_fit raises ValueError


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
    hint="reread section 2: try every accumulation K that divides the batch (1, 2, 3, 4, ...), fewest first, "
    "without checkpointing, and switch checkpointing on only if no K fits; compare the whole predicted "
    "peak (temporaries included) with the budget; if nothing fits even with checkpointing, raise ValueError",
    todo="reread section 2 (the cheapest plan that fits)",
)
def check_cheapest_fit(cheapest_fit: Callable[[stepmem.Shape, int], tuple[int, bool]]) -> str:
    done = []
    for shape, budget in FIT_CASES:
        want_k, want_ckpt = reference_fit(shape, budget)
        where = f"batch {shape.batch}, budget {fmt_bytes(budget)}"
        better = f"K={want_k}, checkpointing={want_ckpt} fits"
        try:
            answer = cheapest_fit(shape, budget)
        except Exception as err:  # noqa: BLE001 - said as a wrong answer for this case
            raise AssertionError(f"{where}: your code raised {type(err).__name__} ({err}), but {better}") from None
        assert isinstance(answer, tuple) and len(answer) == 2, (
            f"{where}: your code returned {answer!r}, not a pair (K, checkpointing); {better}"
        )
        k, ckpt = answer
        assert isinstance(k, int) and k >= 1 and shape.batch % k == 0, (
            f"{where}: K={k!r} does not divide the batch of {shape.batch}"
        )
        chosen = dataclasses.replace(shape, accumulation=k, checkpointing=bool(ckpt))
        got = measure.step_parts(chosen)
        assert got.peak <= budget, (
            f"{where}: K={k}, checkpointing={bool(ckpt)}: measured peak {fmt_bytes(got.peak)} is over the budget"
        )
        assert (k, bool(ckpt)) == (want_k, want_ckpt), (
            f"{where}: K={k}, checkpointing={bool(ckpt)} fits (measured {fmt_bytes(got.peak)}), but {better} "
            "too and costs less (fewer micro-batches, less recompute)"
        )
        done.append(f"{fmt_bytes(budget)}: K={k}, checkpointing={bool(ckpt)}, measured {fmt_bytes(got.peak)}")
    try:
        answer = cheapest_fit(FIT_SHAPE, NO_FIT)
    except ValueError:
        pass
    else:
        raise AssertionError(
            f"budget {fmt_bytes(NO_FIT)}: nothing fits, even with checkpointing, but your code returned {answer!r}; "
            "raise ValueError"
        )
    return f"{len(FIT_CASES)} budgets, each the cheapest plan that fits: " + "; ".join(done)


TOLERANCE = 0.05  # the calculator's peak against a measured step, on the shapes tests/core check


def _shape_problem(small: stepmem.Shape, big: stepmem.Shape) -> str | None:
    """What is wrong with ``small`` as a scaled-down ``big``, said before anything runs; None if nothing."""
    same = ("arch", "precision", "heads", "kv_heads", "optimizer", "tied")
    changed = [f for f in same if getattr(small, f) != getattr(big, f)]
    if changed:
        return f"scale_down changed {changed}: a scaled-down plan keeps them"
    ratio = small.ffn_size / small.hidden, big.ffn_size / big.hidden
    if abs(ratio[0] - ratio[1]) > 0.1 * ratio[1]:
        return f"FFN / hidden went from {ratio[1]:.2f} to {ratio[0]:.2f} (set ffn: the width, 0 meaning 4 x hidden)"
    head = small.hidden // small.heads
    if small.arch == "llama" and head % 2:
        return (
            f"your shape's head size, hidden / heads = {small.hidden} / {small.heads}, is {head}: odd. Rotary "
            f"embeddings turn pairs of dimensions, so a Llama head needs an even size: make hidden a multiple of "
            f"2 x heads = {2 * small.heads}"
        )
    return None


@grader(
    "plan-scale",
    "your plan, scaled down to this CPU",
    hint="reread section 4: keep the architecture, precision, heads and key/value heads (so the ratio of "
    "grouped-query attention stays) and FFN / hidden; shrink hidden (a multiple of heads; for a Llama of "
    "2 x heads, so each head's size is even), layers and vocabulary, and above all seq and batch: the "
    "loss's fp32 logits (batch x seq x vocab x 4 bytes, twice more at the loss's backward) and every "
    "activation grow with batch x seq, until the predicted peak fits the CPU budget",
    todo="reread section 4 (scaling your plan down)",
)
def check_scale_down(scale_down: Callable[[stepmem.Shape], stepmem.Shape], big: stepmem.Shape) -> str:
    small = scale_down(big)
    assert isinstance(small, stepmem.Shape), f"scale_down returned {type(small).__name__}, not a stepmem.Shape"
    problem = _shape_problem(small, big)
    assert problem is None, problem
    pred = stepmem.predict(small)
    assert pred.peak <= CPU_BUDGET, (
        f"predicted peak {fmt_bytes(pred.peak)}: over the CPU budget {fmt_bytes(CPU_BUDGET)} (largest part: "
        f"{max(pred.parts(), key=pred.parts().get)})"
    )
    got = measure.step_parts(small)
    err = (pred.peak - got.peak) / got.peak
    verdict = (
        f"within the {TOLERANCE:.0%} the calculator holds on the tested shapes"
        if abs(err) <= TOLERANCE
        else f"beyond {TOLERANCE:.0%}: the calculator misses this shape (your scale-down is fine; worth reporting)"
    )
    return (
        f"{stepmem.parameters(small) / 1e6:.2f} M parameters, {small.layers} layer{'s' * (small.layers > 1)}, "
        f"hidden {small.hidden}, batch "
        f"{small.batch} x {small.seq}: measured peak {fmt_bytes(got.peak)}, predicted {fmt_bytes(pred.peak)} "
        f"({err:+.1%}, {verdict})"
    )
