"""Lab 4's Accelerate loop as a script: the notebook's loop, on N processes.

Run it from the repository root (two processes on one machine, CPU or GPU):

    # accelerate launch: --multi_gpu selects its multi-process launcher (torchrun inside). On a
    # CPU-only machine the script still runs on the CPU because it builds Accelerator(cpu=True).
    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29511 labs/scripts/accelerate_job.py --processes 2

    # torchrun: the same script, no Accelerate launcher involved
    torchrun --standalone --nproc_per_node=2 labs/scripts/accelerate_job.py --processes 2

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
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from accelerate import Accelerator, DataLoaderConfiguration  # noqa: E402
from accelerate.utils import set_seed  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from transformers import get_linear_schedule_with_warmup  # noqa: E402

from lab_utils.topics.hf import data, guards, meters  # noqa: E402


def train(*, n_train, n_val, epochs, batch_size, grad_accum, lr, seed, checkpointing, cpu, processes):
    """The notebook's loop (section 2), with the process check of section 5."""
    accelerator = Accelerator(
        gradient_accumulation_steps=grad_accum,
        cpu=cpu,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=seed),
    )
    guards.check_processes(accelerator, processes)  # stop if the launcher gave us fewer processes
    set_seed(seed)
    train_ds, val_ds = data.make_splits(n_train, n_val)
    model = data.build_model()
    if checkpointing:
        model.activation_checkpointing_enable()
    train_dl = DataLoader(train_ds, batch_size=batch_size, shuffle=True)
    eval_dl = DataLoader(val_ds, batch_size=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    updates = math.ceil(len(train_dl) / grad_accum) * epochs  # counted BEFORE prepare
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, updates)
    model, optimizer, train_dl, eval_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, eval_dl, scheduler)
    losses, evals = [], []
    for epoch in range(epochs):
        model.train()
        for batch in train_dl:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(loss.item())
        model.eval()
        preds, refs = [], []
        with torch.no_grad():
            for batch in eval_dl:
                p, r = accelerator.gather_for_metrics((model(**batch).logits.argmax(-1), batch["labels"]))
                preds.append(p.cpu())
                refs.append(r.cpu())
        evals.append({"epoch": epoch + 1, **data.accuracy_f1(torch.cat(preds), torch.cat(refs))})
    return {"micro_losses": losses, "evals": evals}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, default=None, help="how many processes you launched; checked")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=64)
    ap.add_argument("--n-val", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument("--no-cpu", action="store_true", help="Accelerator(cpu=False) even without a GPU (the trap)")
    ap.add_argument("--out", default=None, help="rank 0 also writes its JSON result here")
    a = ap.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    result = meters.metered(train)(
        n_train=a.n_train,
        n_val=a.n_val,
        epochs=a.epochs,
        batch_size=a.batch_size,
        grad_accum=a.grad_accum,
        lr=3e-3,
        seed=42,
        checkpointing=not a.no_checkpointing,
        cpu=False if a.no_cpu else gpus < world,  # a GPU per process, or all on the CPU
        processes=a.processes,
    )
    if result["rank"] == 0:
        keep = ("num_processes", "device", "micro_losses", "sync", "collectives", "optimizer_steps")
        text = json.dumps({k: result[k] for k in (*keep, "scheduler_steps", "evals")})
        print(text, flush=True)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
    if dist.is_initialized():  # leave together, then tear the group down (no warning at exit)
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
