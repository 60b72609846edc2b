"""The step-memory calculator against one CUDA GPU's own meters (``make gpu-check``).

    .venv/bin/python -m tools.gpu_check                          # table on stdout, JSON in build/
    .venv/bin/python -m tools.gpu_check --out gpu.json --budget-s 420

For lab 1/2's bert-large setups (the Hugging Face guide's: fp32 AdamW, 4 sequences of 512 tokens,
then 4 micro-batches of one, then with checkpointing) and lab 8's Llama 3.2 1B shape (4 sequences
of 2,048 tokens) in each layout the calculator models (fp32; bf16 autocast over fp32 parameters),
with and without accumulation and checkpointing: one training step measured after a first one
(``measure_anatomy``: ``torch.cuda.max_memory_allocated`` above the step's start), then a third
step under ``torch.cuda.memory._record_memory_history``, whose trace, replayed alloc by free, gives
the memory snapshot's own peak. Both plus the weights, gradients and optimizer state are compared
with ``stepmem.predict``'s peak. Neither meter sees the CUDA context or the allocator's reserve.
The fp32 Llama rows are expected above the prediction by ``math_attention_bytes`` (sdpa's math
kernel: transformers' grouped-query attention in fp32 on CUDA), which the row prints.

Runs go smallest first and stop before the time budget (default 420 s of the 8 minutes) or a run
predicted not to fit the free memory; those rows say "skipped". Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import sys
import time
from pathlib import Path

import torch

from lab_utils.memory import stepmem

__all__ = ["setups", "math_attention_bytes", "snapshot_peak", "trace_peak", "run", "main"]

GiB = 2**30
BUDGET_S = 420.0


def setups() -> list[tuple[str, stepmem.Shape]]:
    """(label, shape) of every run, smallest predicted peak first."""
    from transformers import BertConfig

    from lab_utils.plan.inputs import BUILTIN

    large = BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                       intermediate_size=4096, max_position_embeddings=512)  # fmt: skip  # bert-large-uncased
    large._attn_implementation = "eager"
    out = []
    for k, ckpt in ((1, False), (4, False), (4, True)):  # lab 1 and 2's three rows of the guide
        s = stepmem.from_hf_config(large, batch=4, seq=512, accumulation=k, checkpointing=ckpt, mask_bytes=1)
        out.append((f"bert-large fp32 K={k}{' ckpt' if ckpt else ''}", s))
    llama = stepmem.Shape(**BUILTIN["llama-3.2-1b"], batch=4, seq=2048, attention="sdpa")
    for precision in ("fp32", "bf16"):
        for k, ckpt in ((1, False), (4, False), (1, True), (4, True)):
            s = dataclasses.replace(llama, precision=precision, accumulation=k, checkpointing=ckpt)
            out.append((f"llama-3.2-1b {precision} K={k}{' ckpt' if ckpt else ''}", s))
    return sorted(out, key=lambda ls: stepmem.predict(ls[1]).peak)


def math_attention_bytes(shape: stepmem.Shape) -> int:
    """What ``stepmem`` leaves out of an fp32 grouped-query Llama on CUDA: transformers passes
    ``enable_gqa=True`` (no mask), which only the flash (16-bit) and math kernels take, so fp32 runs
    the math kernel, which keeps at least each layer's fp32 attention probabilities (all layers'
    without checkpointing, one rebuilt layer's with it). 0 for every other setup."""
    if shape.arch != "llama" or shape.precision != "fp32" or shape.n_kv_heads == shape.heads:
        return 0
    return (1 if shape.checkpointing else shape.layers) * shape.micro_batch * shape.heads * shape.seq**2 * 4


def trace_peak(events: list[dict]) -> int:
    """The highest level of bytes allocated above the trace's start, replaying its ``alloc`` and
    ``free_completed`` events (a ``_snapshot()["device_traces"][i]`` list)."""
    level = peak = 0
    for e in events:
        if e["action"] == "alloc":
            level += e["size"]
            peak = max(peak, level)
        elif e["action"] == "free_completed":
            level -= e["size"]
    return peak


def snapshot_peak(step, device: torch.device) -> int:
    """Peak bytes allocated during ``step()`` above its start, from the memory snapshot's trace."""
    torch.cuda.synchronize(device)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=2_000_000,
                                             device=device)  # fmt: skip
    try:
        step()
        torch.cuda.synchronize(device)
        snap = torch.cuda.memory._snapshot(device)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None, device=device)
    return trace_peak(snap["device_traces"][device.index or 0])


def run(label: str, shape: stepmem.Shape, device: torch.device) -> dict:
    """One setup: predicted parts, measured parts, max_memory_allocated's and the snapshot's peak."""
    from lab_utils.labs.lab08_capstone import measure
    from lab_utils.memory.step import measure_anatomy, stepper

    t0 = time.perf_counter()
    want = stepmem.predict(shape)
    model, batch = measure.build(shape, str(device))
    opt = measure._optimizer(shape, model)
    cast = measure._cast(shape, model)
    got = measure_anatomy(model, batch, opt, accumulation=shape.accumulation, autocast=cast)
    state = got.weights + got.gradients + got.optimizer
    step = stepper(model, batch, opt, accumulation=shape.accumulation, autocast=cast)[2]
    snap = state + snapshot_peak(step, device)
    del model, batch, opt, step
    gc.collect()
    torch.cuda.empty_cache()
    return dict(
        setup=label,
        precision=shape.precision,
        accumulation=shape.accumulation,
        checkpointing=shape.checkpointing,
        predicted=want.parts(),
        predicted_peak=want.peak,
        math_attention=math_attention_bytes(shape),  # expected above predicted_peak (fp32 GQA on CUDA)
        measured=got.parts(),
        max_memory_allocated_peak=got.peak,
        snapshot_peak=snap,
        error_vs_allocated=(want.peak - got.peak) / got.peak,
        error_vs_snapshot=(want.peak - snap) / snap,
        seconds=round(time.perf_counter() - t0, 1),
    )


def _row(r: dict) -> str:
    if "skipped" in r:
        return f"{r['setup']:<28} skipped: {r['skipped']}"
    return (
        f"{r['setup']:<28}{r['predicted_peak'] / GiB:>10.2f}{r['max_memory_allocated_peak'] / GiB:>10.2f}"
        f"{r['snapshot_peak'] / GiB:>10.2f}{r['error_vs_allocated']:>+9.1%}{r['error_vs_snapshot']:>+9.1%}"
        f"{r['seconds']:>7.0f}"
        + (f"  expect +{r['math_attention'] / GiB:.1f} GiB: math kernel" if r.get("math_attention") else "")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("build/gpu_check.json"), help="the JSON file written")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="start no run after this many seconds")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing measured, nothing written.")
        return 0
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    print(f"{props.name}, {props.total_memory / GiB:.1f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"{'GiB (peak of one step)':<28}{'predicted':>10}{'max_alloc':>10}{'snapshot':>10}"
          f"{'vs alloc':>9}{'vs snap':>9}{'s':>7}")  # fmt: skip
    t0, rows = time.perf_counter(), []
    for label, shape in setups():
        need = stepmem.predict(shape).peak + math_attention_bytes(shape)
        free = torch.cuda.mem_get_info(device)[0]
        if time.perf_counter() - t0 > args.budget_s:
            rows.append(dict(setup=label, skipped=f"time budget of {args.budget_s:g} s spent"))
        elif need > 0.9 * free:
            rows.append(dict(setup=label, skipped=f"predicted {need / GiB:.1f} GiB, {free / GiB:.1f} GiB free"))
        else:
            try:
                rows.append(run(label, shape, device))
            except torch.cuda.OutOfMemoryError as err:
                rows.append(dict(setup=label, skipped=f"out of memory: {str(err).splitlines()[0]}"))
            # after the except clause, so the traceback no longer holds the failed run's tensors
            gc.collect()
            torch.cuda.empty_cache()
        print(_row(rows[-1]), flush=True)
    result = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=props.name,
        total_memory=props.total_memory,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        note="peaks in bytes of one training step, after a first; no CUDA context, no allocator reserve",
        rows=rows,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
