"""Lab 1's memory calculator against a real device: the seed post's bert-large table, part by part.

    .venv/bin/python labs/01_gradient_checkpointing/scripts/memory_anatomy.py   # cuda if present, else cpu
    .venv/bin/python labs/01_gradient_checkpointing/scripts/memory_anatomy.py --device cpu     # tiny BERT, CPU profiler
    .venv/bin/python labs/01_gradient_checkpointing/scripts/memory_anatomy.py --device cuda --steps 5

Three setups, as in the 2022 Hugging Face guide the seed post quotes (fp32, AdamW, random
512-token sequences with binary labels): batch 4; batch 1 with 4 accumulation steps; the same
with checkpointing (``activation_checkpointing_enable``, non-reentrant). For each: the parts of
one step's memory measured (``step_memory.measure_anatomy``: tensor bytes of weights, gradients
and optimizer state; bytes saved for backward; the allocator's peak above the step's start, which
is ``torch.cuda.max_memory_allocated`` on CUDA and the profiler's allocation events on a CPU)
next to the calculator's prediction (``stepmem.predict``), and the time per sample.

On CUDA the model has bert-large's shape (24 layers, hidden 1024, 16 heads, sequence 512; about
11.5 GiB allocated at batch 4) and the guide's published numbers are printed beside ours, labelled published
(they are NVML totals with the CUDA context, so above the allocator's peak; the script also prints
``max_memory_reserved``, which is closer to what NVML sees). On a CPU (or with ``--size tiny``) a
tiny BERT of the same structure runs, and the CUDA part is skipped with a line saying so.

Exits non-zero when a measured part (weights, gradients, optimizer, activations) or the peak is
more than 10 % away from the prediction.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch

from lab_utils.memory import fmt_bytes, stepmem
from lab_utils.memory.step import measure_anatomy
from lab_utils.models import bert_classifier

SIZES = {  # n_layer, hidden, n_head, vocab, seq, batch
    "large": dict(n_layer=24, hidden=1024, n_head=16, vocab_size=30522, seq=512, batch=4),
    "tiny": dict(n_layer=2, hidden=32, n_head=2, vocab_size=64, seq=32, batch=4),
}
SETUPS = [(1, False), (4, False), (4, True)]  # (accumulation, checkpointing), as in the guide
TOLERANCE = 0.10


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run_setup(size: dict, accumulation: int, checkpointing: bool, dev: torch.device, steps: int) -> dict:
    """Build the model, measure one step's parts, time ``steps`` more steps, predict the parts."""
    model = bert_classifier(
        n_layer=size["n_layer"],
        hidden=size["hidden"],
        n_head=size["n_head"],
        vocab_size=size["vocab_size"],
        n_positions=size["seq"],
        dropout=0.1,
    ).to(dev)
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(0, size["vocab_size"], (size["batch"], size["seq"]), generator=g).to(dev),
        "labels": torch.randint(0, 2, (size["batch"],), generator=g).to(dev),
    }
    # the guide's AdamW (transformers' own, 2022) looped over tensors: no foreach buffers
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=False)
    measured = measure_anatomy(model, batch, opt, accumulation=accumulation)
    micro = size["batch"] // accumulation
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        for k in range(accumulation):
            mb = {key: v[k * micro : (k + 1) * micro] for key, v in batch.items()}
            (model(**mb).loss / accumulation).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
    _sync(dev)
    per_sample = (time.perf_counter() - t0) / (steps * size["batch"])
    shape = stepmem.from_hf_config(
        model.config,
        batch=size["batch"],
        seq=size["seq"],
        accumulation=accumulation,
        checkpointing=checkpointing,
        mask_bytes=1 if dev.type == "cuda" else 4,  # dropout masks: bool on CUDA, float on CPU
        foreach=False,
    )
    out = dict(measured=measured, predicted=stepmem.predict(shape), seconds_per_sample=per_sample)
    if dev.type == "cuda":
        out["reserved"] = torch.cuda.max_memory_reserved(dev)
    del model, opt, batch
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    return out


def report(name: str, r: dict, published: dict | None) -> list[str]:
    """Print one setup's table; return the parts more than TOLERANCE away from the prediction."""
    m, p = r["measured"], r["predicted"]
    print(f"\n{name}: {r['seconds_per_sample'] * 1e3:.1f} ms per sample")
    print(f"  {'part':<13}{'measured':>12}{'predicted':>12}{'ratio':>8}")
    bad = []
    for part in ("weights", "gradients", "optimizer", "activations", "temporaries", "peak"):
        got, want = getattr(m, part), getattr(p, part)
        ratio = want / got if got else float("nan")
        print(f"  {part:<13}{fmt_bytes(got):>12}{fmt_bytes(want):>12}{ratio:>8.2f}")
        if part != "temporaries" and abs(want - got) > TOLERANCE * got:
            bad.append(f"{name}: {part} predicted {fmt_bytes(want)}, measured {fmt_bytes(got)}")
    if "reserved" in r:
        print(f"  {'reserved':<13}{fmt_bytes(r['reserved']):>12}   (max_memory_reserved: the allocator's pool)")
    if published is not None:
        print(
            f"  PUBLISHED (2022 guide, V100, NVML incl. CUDA context): {published['mib']} MiB, "
            f"{published['seconds']} s for 512 samples ({1e3 * published['seconds'] / 512:.1f} ms per sample)"
        )
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--size", choices=["auto", *SIZES], default="auto", help="auto: large on CUDA, tiny on CPU")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per setup (after the measured one)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: give at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device here; use --device cpu or auto")
    if args.device == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        dev = torch.device(args.device)
    size_name = args.size if args.size != "auto" else ("large" if dev.type == "cuda" else "tiny")
    size = SIZES[size_name]
    print(f"device {dev}, {size_name} BERT: {dataclasses.asdict(stepmem.Shape(**_shape_fields(size)))}")
    if dev.type != "cuda":
        print("CUDA part skipped: no GPU here (peaks come from the CPU profiler, dropout masks are floats)")
    bad = []
    for (acc, ckpt), pub in zip(SETUPS, stepmem.PUBLISHED):
        name = f"batch {size['batch'] // acc} x {acc}" + (" + checkpointing" if ckpt else "")
        r = run_setup(size, acc, ckpt, dev, args.steps)
        bad += report(name, r, pub if size_name == "large" else None)
    for line in bad:
        print("CLAIM FAILED:", line)
    print("\nall parts within 10% of the calculator" if not bad else f"\n{len(bad)} parts off by more than 10%")
    return 1 if bad else 0


def _shape_fields(size: dict) -> dict:
    return dict(
        arch="bert",
        layers=size["n_layer"],
        hidden=size["hidden"],
        heads=size["n_head"],
        seq=size["seq"],
        batch=size["batch"],
        vocab=size["vocab_size"],
        positions=size["seq"],
    )


if __name__ == "__main__":
    sys.exit(main())
