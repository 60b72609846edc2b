"""python -m lab_utils.plan: the per-strategy table for a model you bring (see lab_utils.plan)."""

from __future__ import annotations

import argparse
import sys

from lab_utils import plan
from lab_utils.plan.inputs import BUILTIN, DEFAULT_TFLOPS, model_fields, read_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab_utils.plan", description=plan.__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help=f"a transformers config.json, or one of {sorted(BUILTIN)}")
    ap.add_argument("--batch", type=int, required=True, help="global batch (sequences per update)")
    ap.add_argument("--seq", type=int, required=True, help="sequence length (tokens)")
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument(
        "--memory",
        required=True,
        help="memory of one device: 80GB reads as 80 GiB, as an 80GB GPU holds; bytes (80e9) for a decimal size",
    )
    ap.add_argument("--link", default="100Gb", help="between devices: 100Gb (bits/s), 25GB/s, or InfiniBand, 10GbE...")
    ap.add_argument("--latency-us", type=float, default=10.0)
    ap.add_argument(
        "--dtype", default=None, help="bf16 (autocast, fp32 master weights) or fp32; default bf16 for Llama, else fp32"
    )
    ap.add_argument("--optimizer", default="adamw", help=f"one of {plan.OPTIMIZERS}")
    ap.add_argument(
        "--tflops", type=float, default=None, help=f"sustained TFLOP/s per device; default {DEFAULT_TFLOPS}"
    )
    ap.add_argument("--top", type=int, default=10, help="how many of the ranked plans to print")
    ap.add_argument("--figure", default=None, help="write the figure to this .html file")
    args = ap.parse_args(argv)
    try:
        shape, hw = plan.request(
            args.config, batch=args.batch, seq=args.seq, devices=args.devices, memory=args.memory, link=args.link,
            dtype=args.dtype, optimizer=args.optimizer, tflops=args.tflops, latency_us=args.latency_us,
        )  # fmt: skip
    except ValueError as e:
        ap.error(str(e))
    ranked = plan.rank(plan.candidates(shape, hw))
    fitting = [p for p in ranked if p.fits]
    print(f"{args.config}: {plan.stepmem.parameters(shape) / 1e6:.0f} M parameters, batch {args.batch} x {args.seq}, "
          f"{shape.precision}, {args.optimizer}")  # fmt: skip
    print(read_line(args.config, model_fields(args.config)))
    print(plan.report.legend(hw))
    print(f"\nThe {min(args.top, len(fitting))} fastest plans that fit ({len(fitting)} of {len(ranked)} fit):")
    print(
        plan.report.table(fitting, top=args.top, devices=args.devices)
        if fitting
        else "  none fits: more devices, or more memory"
    )
    print("\nEach strategy at its best accumulation:")
    print(plan.report.table(plan.report.best_per_family(ranked), devices=args.devices))
    print()
    print(plan.report.left_out(shape))
    if args.figure:
        plan.report.figure(plan.report.best_per_family(ranked), hw).write_html(args.figure, include_plotlyjs=True)
        print(f"\nfigure: {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
