"""Lab 8's calculator against a real step's peak: a Llama-style decoder of ~125 M parameters on CPU.

    .venv/bin/python labs/08_plan_your_run/scripts/llama_peak.py                       # fp32 and bf16, AdamW
    .venv/bin/python labs/08_plan_your_run/scripts/llama_peak.py --precision bf16 --seq 512

For each precision: one training step (forward, backward, ``optimizer.step()``) of a
``LlamaForCausalLM`` built offline (12 layers, hidden 768, 12 heads with 4 key/value heads, SwiGLU
2048, untied head, vocabulary 32000, sdpa), run in a fresh Python started with
``MALLOC_MMAP_THRESHOLD_=65536``; its peak resident memory (``VmHWM`` after ``clear_refs``) less
the process before the model existed, next to ``stepmem.predict``'s peak. No torch meter is
involved. Exits non-zero when they differ by more than 5 %.
"""

from __future__ import annotations

import argparse
import sys
import time

from lab_utils.labs.lab08_capstone.measure import process_peak
from lab_utils.memory import fmt_bytes, stepmem

TOLERANCE = 0.05


def shape(precision: str, seq: int, batch: int) -> stepmem.Shape:
    return stepmem.Shape(
        arch="llama",
        layers=12,
        hidden=768,
        heads=12,
        kv_heads=4,
        ffn=2048,
        vocab=32000,
        positions=max(seq, 2048),
        seq=seq,
        batch=batch,
        attention="sdpa",
        precision=precision,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per precision (bf16 on a CPU is slow)")
    args = ap.parse_args(argv)
    bad = 0
    for precision in ("fp32", "bf16") if args.precision == "both" else (args.precision,):
        s = shape(precision, args.seq, args.batch)
        t0 = time.perf_counter()
        got = process_peak(s, timeout_s=args.timeout)
        measured = got["hwm"] - got["before"]
        want = stepmem.predict(s)
        err = (want.peak - measured) / measured
        bad += abs(err) > TOLERANCE
        print(
            f"{precision}: {stepmem.parameters(s) / 1e6:.1f} M parameters, batch {args.batch} x {args.seq}: "
            f"measured peak {fmt_bytes(measured)} (VmHWM less the process before the model), "
            f"predicted {fmt_bytes(want.peak)} ({err:+.1%}); parts predicted: "
            + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in want.parts().items())
            + f"  [{time.perf_counter() - t0:.0f} s]"
        )
    print("all within 5%" if not bad else f"{bad} beyond 5%")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
