"""Lab 4's Accelerate loop as a script: the same function the notebook launches, on N processes.

Run it from the repository root (two processes on one machine, CPU or GPU):

    # accelerate launch: --multi_gpu selects its multi-process launcher (torchrun inside). On a
    # CPU-only machine the script still runs on the CPU because it builds Accelerator(cpu=True).
    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29511 labs/scripts/accelerate_job.py --processes 2

    # torchrun: the same script, no Accelerate launcher involved
    torchrun --standalone --nproc_per_node=2 labs/scripts/accelerate_job.py --processes 2

    # the function alone, through lab_utils.run (kwargs as JSON)
    torchrun --standalone --nproc_per_node=2 -m lab_utils.run lab_utils.hf:run_accelerate \\
        --kwargs '{"expected_processes": 2, "epochs": 1}'

Pitfall: ``accelerate launch --cpu --num_processes 2 ...`` starts ONE process (its --cpu path
is the single-process launcher). ``--processes 2`` makes the script check what it got and stop
with an explanation instead of training quietly on one process. Likewise, on CPU an Accelerator
built without ``cpu=True`` leaves each process training alone; the same check catches it
(``--no-cpu`` reproduces that trap).

Rank 0 prints one JSON line (processes, micro-batch losses, sync flags, collectives per
micro-batch, evaluations) and writes it to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--processes", type=int, default=None, help="how many processes you launched; the job stops if it sees fewer"
    )
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=64)
    ap.add_argument("--n-val", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument(
        "--no-cpu", action="store_true", help="build Accelerator(cpu=False) even without a GPU (reproduces the trap)"
    )
    ap.add_argument("--out", default=None, help="rank 0 also writes its JSON result here")
    a = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from lab_utils.hf import run_accelerate

    result = run_accelerate(
        n_train=a.n_train,
        n_val=a.n_val,
        epochs=a.epochs,
        batch_size=a.batch_size,
        grad_accum=a.grad_accum,
        checkpointing=not a.no_checkpointing,
        expected_processes=a.processes,
        cpu=False if a.no_cpu else None,
    )
    if result["rank"] == 0:
        keep = (
            "num_processes",
            "device",
            "micro_losses",
            "sync",
            "collectives",
            "optimizer_steps",
            "scheduler_steps",
            "lrs",
            "evals",
            "updates",
        )
        text = json.dumps({k: result[k] for k in keep})
        print(text, flush=True)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
    import torch.distributed as dist

    if dist.is_initialized():  # leave together, then tear the group down (no warning at exit)
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
