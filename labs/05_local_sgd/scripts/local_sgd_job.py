"""Local SGD to take home: Accelerate's gradient accumulation, LocalSGD counted per optimizer
update, and DiLoCo's outer Nesterov step on top of each averaging. Plain PyTorch + Accelerate:
copy this file anywhere.

The outer step defaults to lr 1.0 without momentum, which is plain parameter averaging (LocalSGD
itself). DiLoCo's paper setting is ``--outer-lr 0.7 --outer-momentum 0.9``, tuned for long runs
from a synchronously trained model; lab 5's stored study ran it in one small setting (2 ranks,
H = 32, 16 rounds), where it ended worse than plain averaging: that ranks the setting, not DiLoCo.

Run it on N processes of one machine (CPU or GPU):

    # accelerate launch: --multi_gpu selects its multi-process launcher; without a GPU the script
    # still runs on the CPU because it builds Accelerator(cpu=True)
    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29512 local_sgd_job.py --processes 2

    # torchrun: the same script without the Accelerate launcher
    torchrun --standalone --nproc_per_node=2 local_sgd_job.py --outer-lr 0.7 --outer-momentum 0.9

    # two machines (NODE_RANK 0 on the one at address $MASTER, 1 on the other; port 29500 open):
    # torchrun --nnodes=2 --node_rank=$NODE_RANK --nproc_per_node=2 \\
    #     --rdzv_backend=static --master_addr=$MASTER --master_port=29500 local_sgd_job.py --processes 4

Tested: the lab's test suite runs the one-machine ``torchrun`` form on 2 CPU processes (one run that
checks every averaging and the final outer step) and checks ``outer_step`` against a hand-written
Nesterov step; the ``accelerate launch`` form is the one lab 4's script is tested with.

Pitfall: ``accelerate launch --cpu --num_processes 2`` starts ONE process, and on a CPU an
Accelerator built without ``cpu=True`` leaves each process training alone; ``--processes N``
(optional) makes the script stop with an explanation instead of training quietly without averaging.

At the end: ``LocalSGD`` averages once more when its block exits, without an outer step, so when
the number of updates is not a multiple of ``--local-sgd-steps`` the last local updates would end
as a plain average, not as DiLoCo's step. The script takes that last round's outer step itself
before the block exits (whose averaging then changes nothing: the processes already agree).

What it proves: after each optimizer update every process reports a checksum of its parameters
(an all-gather outside the method, for the record). They must differ after the local updates and
be identical after each averaging. Rank 0 prints one JSON line and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.local_sgd import LocalSGD
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n: int, dim: int = 16, classes: int = 4, seed: int = 0) -> TensorDataset:
    """Gaussian blobs, one per class (each process reads different batches of them)."""
    g = torch.Generator().manual_seed(seed)
    centers = 2 * torch.randn(classes, dim, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return TensorDataset(centers[y] + torch.randn(n, dim, generator=g), y)


def checksum(model: nn.Module) -> torch.Tensor:
    """Three numbers that differ when the parameters do (equal bits give equal sums)."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    return torch.stack([flat.sum(), (flat * flat).sum(), flat[::7].sum()])


def outer_step(model: nn.Module, anchor: list[torch.Tensor], outer: torch.optim.Optimizer) -> None:
    """DiLoCo: the averaged move away from the anchor is the outer gradient; the outer Nesterov
    step moves the anchor, which every process then copies (the same on all: they agree)."""
    for a, p in zip(anchor, model.parameters()):
        a.grad = a.detach() - p.detach()
    outer.step()
    with torch.no_grad():
        for a, p in zip(anchor, model.parameters()):
            p.copy_(a)


def average(accelerator: Accelerator, model: nn.Module) -> None:
    """Every parameter replaced by its mean over the processes (what LocalSGD does every k updates)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(accelerator.reduce(p.detach().clone(), "mean"))


def train(a: argparse.Namespace) -> dict:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accelerator = Accelerator(cpu=torch.cuda.device_count() < world, gradient_accumulation_steps=a.accumulation)
    if a.processes is not None and accelerator.num_processes != a.processes:
        raise RuntimeError(
            f"expected {a.processes} processes, this Accelerator sees {accelerator.num_processes}: "
            "`accelerate launch --cpu` starts ONE process (use --multi_gpu, or torchrun), and on a CPU "
            "the Accelerator needs cpu=True, else each process trains alone and nothing is averaged"
        )
    torch.manual_seed(a.seed)  # the same initial model on every process
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    loader = DataLoader(make_data(a.micro_batches * a.batch * accelerator.num_processes), batch_size=a.batch)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    inner = accelerator.unwrap_model(model)
    anchor = [p.detach().clone().requires_grad_() for p in inner.parameters()]
    outer = torch.optim.SGD(anchor, lr=a.outer_lr, momentum=a.outer_momentum, nesterov=a.outer_momentum > 0)

    losses, averaged, equal, outer_steps = [], [], [], 0
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=a.local_sgd_steps, enabled=True) as lsgd:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                if accelerator.sync_gradients:  # count optimizer updates, not micro-batches
                    lsgd.step()  # every local_sgd_steps updates: barrier, then parameters averaged
                    did_average = lsgd.enabled and lsgd.num_steps % a.local_sgd_steps == 0
                    if did_average:
                        outer_step(inner, anchor, outer)
                        outer_steps += 1
                    sums = accelerator.gather(checksum(inner)).view(-1, 3)  # for the record only
                    averaged.append(did_average)
                    equal.append(bool((sums == sums[0]).all()))
                    losses.append(round(accelerator.reduce(loss.detach(), "mean").item(), 5))
        if lsgd.enabled and lsgd.num_steps % a.local_sgd_steps:  # a last, shorter round: DiLoCo's step too
            average(accelerator, inner)
            outer_step(inner, anchor, outer)
            outer_steps += 1
    # leaving the block averaged once more (a no-op now): every process ends with the same model
    final = accelerator.gather(checksum(inner)).view(-1, 3)
    del model, optimizer, loader, inner, anchor, outer, lsgd  # free gloo-backed objects before exit:
    gc.collect()  # otherwise a process can abort at interpreter exit ("terminate called ...")
    return {
        "num_processes": accelerator.num_processes,
        "updates": len(averaged),
        "outer_steps": outer_steps,
        "averaged_after_update": averaged,
        "ranks_equal_after_update": equal,
        "ranks_equal_at_end": bool((final == final[0]).all()),
        "losses": losses,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=None, help="how many processes you launched (checked)")
    ap.add_argument("--accumulation", type=int, default=2, help="micro-batches per optimizer update")
    ap.add_argument("--local-sgd-steps", type=int, default=4, help="optimizer updates between averagings")
    ap.add_argument("--micro-batches", type=int, default=24, help="micro-batches per process")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3, help="inner AdamW learning rate")
    ap.add_argument("--outer-lr", type=float, default=1.0, help="outer learning rate (1.0 and no momentum: LocalSGD)")
    ap.add_argument("--outer-momentum", type=float, default=0.0, help="outer Nesterov momentum (DiLoCo's paper: 0.9)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="rank 0 also writes its JSON result here")
    a = ap.parse_args(argv)
    if (a.processes is not None and a.processes < 1) or a.accumulation < 1 or a.local_sgd_steps < 1:
        sys.exit("--processes, --accumulation and --local-sgd-steps must be >= 1")
    if a.outer_lr <= 0 or not 0 <= a.outer_momentum < 1:
        sys.exit(f"--outer-lr {a.outer_lr} must be > 0 and --outer-momentum {a.outer_momentum} in [0, 1)")
    result = train(a)
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        text = json.dumps(result)
        print(text, flush=True)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text + "\n")
    if torch.distributed.is_initialized():  # leave together, then close the group
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    # Skip the interpreter's teardown: torch 2.13's gloo can abort there ("terminate called without
    # an active exception": a gloo thread frees a finished collective while Python shuts down),
    # about one run in 15 on a busy CPU, after the result is printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
