"""Benchmark of lab 1: what checkpointing saves and costs, measured on this machine's device.

    .venv/bin/python labs/01_gradient_checkpointing/scripts/bench_checkpointing.py   # cuda if present, else cpu
    .venv/bin/python labs/01_gradient_checkpointing/scripts/bench_checkpointing.py --device cpu --steps 5

Part 1, a 64-block uniform MLP chain: bytes kept for backward (saved-tensor hooks) and FLOPs
(FlopCounterMode) for no checkpointing, the sqrt(N) plan and the planner's plan at its smallest
budget. Claim checked: sqrt(N) keeps at most 2*sqrt(N)/N of the bytes (25% at N = 64) for at
most one extra forward pass of FLOPs.

Part 2, a table in the style of the Hugging Face guide (baseline vs checkpointing on the tiny
transformer: a GPT-2 from a config, ``activation_checkpointing_enable``): time for the run,
samples/s, bytes saved for backward and peak memory (CUDA ``max_memory_allocated``, or the
CPU profiler's allocation events). Exits non-zero if a claim fails.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
from torch.utils.checkpoint import checkpoint

from lab_utils.labs.lab01_checkpointing import measure, planner, schedules
from lab_utils.memory import cpu_peak, fmt_bytes, measure_step
from lab_utils.memory.recompute import measure_recompute
from lab_utils.models import mlp, tiny_gpt2
from lab_utils.timing import Timer


def forward_segments(blocks, x, segments):
    """Run a schedule, as the lab writes it: "full" segments under one checkpoint, "store" as usual."""
    h = x
    for start, stop, mode in segments:
        part = blocks[start:stop]
        h = part(h) if mode == "store" else checkpoint(part, h, use_reentrant=False)
    return h


def chain_part(dev: torch.device, n: int, width: int, rows: int) -> bool:
    model = mlp(width=width, depth=n, seed=0).to(dev)
    x = torch.randn(rows, width, device=dev)
    act, inp, cost = measure.profile_blocks(model, x)
    plan = planner.plan_for_budget(act, inp, cost, planner.min_peak(act, inp))
    rows_ = measure.compare_strategies(
        model,
        x,
        {
            "none": lambda b, x: b(x),
            "sqrt(N)": lambda b, x: forward_segments(b, x, schedules.segments_sqrt(n)),
            "planner (min budget)": lambda b, x: forward_segments(b, x, plan.segments),
        },
        repeat=3,
        blocks=(act, inp, cost),
    )
    print(f"\n{n}-block MLP chain, width {width}, {rows} rows, on {dev}")
    print(measure.results_table(rows_, timed=True))
    base, sq = rows_[0], rows_[1]
    ratio, extra = sq.kept / base.kept, sq.extra_flops / sq.forward_flops
    limit = 2 * math.sqrt(n) / n
    ok = ratio <= limit and extra <= 1.0 and all(r.grad_diff <= 1e-4 for r in rows_)
    print(
        f"sqrt(N) keeps {ratio:.2%} of the baseline's bytes (limit {limit:.0%}), "
        f"recomputes {extra:.2f} forward passes of FLOPs (limit 1.00): {'PASS' if ok else 'FAIL'}"
    )
    return ok


def _train_steps(model, ids: torch.Tensor, steps: int, batch: int) -> dict:
    """Bytes saved, peak, re-run calls and time of ``steps`` AdamW steps of a language model."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def loss() -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss

    def step() -> None:
        loss().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    step()  # warm-up; optimizer state and grads allocated
    rep = measure_step(model, loss)
    peak = rep.peak_cuda_bytes if rep.peak_cuda_bytes is not None else cpu_peak(step)
    calls = measure_recompute(model, loss).n_recomputed_calls
    opt.zero_grad(set_to_none=False)
    with Timer() as t:
        for _ in range(steps):
            step()
    return dict(seconds=t.seconds, sps=steps * batch / t.seconds, saved=rep.saved_bytes, peak=peak, calls=calls)


def hf_part(dev: torch.device, layers: int, embd: int, batch: int, seq: int, steps: int) -> bool:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (batch, seq), generator=g).to(dev)
    results = {}
    for name in ("baseline", "checkpointing"):
        model = tiny_gpt2(n_layer=layers, n_embd=embd, n_positions=seq, seed=0).to(dev).train()
        if name == "checkpointing":
            enable = getattr(model, "activation_checkpointing_enable", None)
            if enable is not None:  # transformers >= 5 (the old name warns)
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        results[name] = _train_steps(model, ids, steps, batch)
    print(
        f"\ntiny GPT-2 ({layers} layers, n_embd {embd}), batch {batch} x {seq} tokens, {steps} steps, "
        f"on {dev} (peak: {'CUDA max_memory_allocated' if dev.type == 'cuda' else 'CPU profiler'})"
    )
    print(f"{'':<15}{'time':>9}{'samples/s':>11}{'saved':>11}{'peak':>11}{'re-run calls':>14}")
    for k, r in results.items():
        print(
            f"{k:<15}{r['seconds']:>8.2f}s{r['sps']:>11.1f}{fmt_bytes(r['saved']):>11}{fmt_bytes(r['peak']):>11}"
            f"{r['calls']:>14}"
        )
    b, c = results["baseline"], results["checkpointing"]
    print(
        f"checkpointing: memory saved {1 - c['saved'] / b['saved']:.0%} (saved bytes), "
        f"{1 - c['peak'] / b['peak']:.0%} (peak); time {c['seconds'] / b['seconds'] - 1:+.0%}"
    )
    return c["saved"] < b["saved"] and c["calls"] > 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    dev = torch.device(a.device)
    ok = chain_part(dev, a.blocks, a.width, a.rows)
    ok = hf_part(dev, a.layers, a.embd, a.batch, a.seq, a.steps) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
