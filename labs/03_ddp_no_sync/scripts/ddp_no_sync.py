"""Lab 3 as a script: DDP with ``no_sync`` accumulation, a DistributedSampler, checkpoint and resume.

One machine, two processes (CPU: gloo; one GPU per process: NCCL). Run from the repository root:

    torchrun --standalone --nproc_per_node=2 labs/03_ddp_no_sync/scripts/ddp_no_sync.py --epochs 4 --k 4 --ckpt-dir ckpt

Stopped half-way? The same command resumes from the newest ``ckpt/epoch_<n>.pt`` (or name one
with ``--resume ckpt/epoch_2.pt``). Two machines: on each, NODE_RANK=0 on the first and 1 on the
second, MASTER = the first machine's address, port 29500 open between them:

    torchrun --nnodes=2 --node_rank=$NODE_RANK --nproc_per_node=2 \\
        --rdzv_backend=static --master_addr=$MASTER --master_port=29500 \\
        labs/03_ddp_no_sync/scripts/ddp_no_sync.py --epochs 4 --k 4 --ckpt-dir ckpt

Only global rank 0 writes checkpoints: with this static rendezvous it runs on node 0 (the MASTER
machine). (``--rdzv_backend=c10d`` ignores ``--node_rank`` and puts rank 0 on the machine whose
host name sorts first.) To resume on several machines, every machine must read the same
``--ckpt-dir`` (shared storage) or a copy of it. Do not pass ``--master_port=0`` to torchrun
(it hangs in torch 2.13 on this course's machines): use ``--standalone`` on one machine, or a port you
know is free. A checkpoint is written to a temporary file and renamed into place (``os.replace``),
so a run killed while saving leaves the previous epoch's file intact, never a truncated one.

What it does: a small MLP on a seeded regression; each epoch, ``DistributedSampler.set_epoch``
reshuffles the samples across ranks (without it every epoch repeats the same order); every ``--k``
micro-batches make one optimizer update, the first k - 1 of them forward AND backward inside
``no_sync()`` (gradients accumulate locally), the last one outside (one all-reduce of the sum).
SGD with momentum, so a resume must restore the optimizer's state too. Global rank 0 prints one
JSON line at the end (and writes it to ``--out``): world size, epochs run, mean loss per epoch, the
first sample indices rank 0 drew in each epoch (to see the reshuffle) and the final parameters.
Nothing here comes from the course's ``lab_utils``.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import re
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def setup() -> tuple[int, int, torch.device]:
    """The process group: NCCL when this machine has a GPU for every local process, else gloo."""
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def build(width: int) -> nn.Sequential:
    torch.manual_seed(0)  # the same weights on every rank (DDP also broadcasts rank 0's)
    return nn.Sequential(nn.Linear(8, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1))


def dataset(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(n, 1, generator=g))


def latest(ckpt_dir: str) -> str | None:
    found = glob.glob(os.path.join(ckpt_dir, "epoch_*.pt"))
    return max(found, key=lambda p: int(re.findall(r"epoch_(\d+)\.pt$", p)[0]), default=None)


def train_epoch(ddp: DDP, opt: torch.optim.Optimizer, loader: DataLoader, k: int, device: torch.device) -> float:
    """One epoch, one optimizer update per k micro-batches, one all-reduce per update."""
    total = 0.0
    opt.zero_grad()
    for i, (x, y) in enumerate(loader):
        sync = (i + 1) % k == 0  # the last micro-batch of its update
        with nullcontext() if sync else ddp.no_sync():  # the forward too: it arms the reducer
            loss = F.mse_loss(ddp(x.to(device)), y.to(device)) / k
            loss.backward()
        total += loss.item()
        if sync:
            opt.step()
            opt.zero_grad()
    return total * k / len(loader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4, help="epochs in all (a resumed run stops there too)")
    parser.add_argument("--k", type=int, default=4, help="micro-batches per optimizer update")
    parser.add_argument("--micro-batch", type=int, default=8, help="samples per micro-batch per rank")
    parser.add_argument("--samples", type=int, default=512, help="samples in the dataset")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--ckpt-dir", default=None, help="rank 0 saves epoch_<n>.pt here; resume from the newest")
    parser.add_argument("--resume", default=None, help="resume from this checkpoint instead")
    parser.add_argument("--out", default=None, help="global rank 0 writes its JSON line here")
    args = parser.parse_args()

    rank, world, device = setup()
    data = dataset(args.samples)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(data, batch_size=args.micro_batch, sampler=sampler, drop_last=True)
    if len(loader) % args.k:
        raise SystemExit(f"--k={args.k} must divide the {len(loader)} micro-batches per rank per epoch")
    ddp = DDP(build(args.width).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)

    start = 0
    path = args.resume or (latest(args.ckpt_dir) if args.ckpt_dir else None)
    if path:  # every rank loads the same file, onto its own device
        state = torch.load(path, map_location=device)
        ddp.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]

    losses, first = {}, {}
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        first[epoch] = list(iter(sampler))[:4]  # this rank's first samples of the epoch
        losses[epoch] = train_epoch(ddp, opt, loader, args.k, device)
        if args.ckpt_dir and rank == 0:  # one writer; the others wait at the barrier
            os.makedirs(args.ckpt_dir, exist_ok=True)
            state = {"epoch": epoch + 1, "model": ddp.module.state_dict(), "optimizer": opt.state_dict()}
            final = os.path.join(args.ckpt_dir, f"epoch_{epoch + 1}.pt")
            torch.save(state, final + ".tmp")  # complete on disk before it takes the real name
            os.replace(final + ".tmp", final)  # atomic: readers see the old file or the new one
        dist.barrier()

    if rank == 0:
        params = torch.cat([p.detach().flatten().cpu() for p in ddp.module.parameters()])
        line = json.dumps(
            {"world_size": world, "backend": dist.get_backend(), "resumed_from": path, "epochs_run": list(losses),
             "losses": list(losses.values()), "first_indices": list(first.values()), "params": params.tolist()}
        )  # fmt: skip
        print(line)
        if args.out:
            with open(args.out, "w") as f:
                f.write(line)
    del ddp, opt  # free the gloo-backed objects before the group goes
    gc.collect()
    dist.barrier()  # leave together: no rank is still in a collective
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Skip the interpreter's teardown: torch 2.13's gloo can abort there ("terminate called without
    # an active exception": a gloo thread frees a finished collective while Python shuts down),
    # about one run in 15 on a busy CPU, after everything is saved and printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
