"""Lab 7 as a script: FSDP2 with gradient accumulation and activation checkpointing, on N processes.

Run it from the repository root (two processes on one machine; CPU with gloo, or one GPU each):

    torchrun --standalone --nproc_per_node=2 labs/scripts/fsdp_accumulate.py --steps 5 --k 4

On two machines, start the same command on each with --nnodes=2 --node_rank=<0|1>
--rdzv_backend=static --master_addr=<address of node 0> --master_port=29500 instead of
--standalone (node 0 then holds rank 0, the one that prints; see README, "Beyond one machine").

What it does: a model of blocks (Linear + GELU), each block checkpointed and then sharded with
``fully_shard`` (inner blocks first, the root last); each optimizer update runs ``--k``
micro-steps, gradient sync off on all but the last (``set_requires_gradient_sync``). Rank 0
prints one JSON line (world size, loss per update, parameter bytes per rank, the reduce-scatters
each update made, how many times each block's forward ran per micro-step (2 when it is
checkpointed: the forward, and its recompute in backward), the largest difference from the same
training on one process with one large batch per update) and writes it to ``--out`` when
given. Nothing here comes from the course's ``lab_utils``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


class Checkpointed(nn.Module):
    """Keeps only the block's input for backward and recomputes the rest."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)


def build(width: int, depth: int, dtype: torch.dtype) -> nn.Sequential:
    torch.manual_seed(0)  # every rank builds the same weights, then keeps its shard
    return nn.Sequential(*[Block(width) for _ in range(depth)]).to(dtype)


def data(args: argparse.Namespace, world: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole run's samples, the same on every rank: steps x world x k micro-batches."""
    g = torch.Generator().manual_seed(1)
    n = args.steps * world * args.k * args.micro_batch
    return torch.randn(n, args.width, generator=g, dtype=dtype), torch.randn(n, args.width, generator=g, dtype=dtype)


def one_process_reference(args: argparse.Namespace, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype):
    """The same updates on one process, one large batch each, no sharding, no checkpointing."""
    model = build(args.width, args.depth, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for xs, ys in zip(x.chunk(args.steps), y.chunk(args.steps)):
        opt.zero_grad()
        F.mse_loss(model(xs), ys).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def count_calls(module: object, name: str) -> list[int]:
    """Replace ``module.<name>`` by a wrapper counting its calls; the count is the list's one item.
    (FSDP2 reduce-scatters each unit's gradients with ``torch.distributed.reduce_scatter_single``.)"""
    calls, fn = [0], getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return fn(*args, **kwargs)

    setattr(module, name, counted)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="optimizer updates")
    parser.add_argument("--k", type=int, default=4, help="micro-steps per update")
    parser.add_argument("--micro-batch", type=int, default=8, help="samples per micro-batch per rank")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--out", help="also write rank 0's JSON line to this file")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dtype = getattr(torch, args.dtype)

    model = build(args.width, args.depth, dtype)
    for i, block in enumerate(model):  # 1. checkpoint each block ...
        model[i] = Checkpointed(block)
    mesh = init_device_mesh(device.type, (world,))
    for block in model:  # 2. ... then shard each block (one all-gather unit each) ...
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # 3. ... and the root last
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)  # built on the shards

    forwards = [0] * args.depth  # each block's forward calls (started: a recompute may stop early), recomputes included
    for i, ckpt in enumerate(model):
        ckpt.block.register_forward_pre_hook(lambda *_, i=i: forwards.__setitem__(i, forwards[i] + 1))
    reduce_scatters = count_calls(dist, "reduce_scatter_single")

    x, y = data(args, world, dtype)
    losses = []
    for xs, ys in zip(x.chunk(args.steps), y.chunk(args.steps)):
        pieces = list(zip(xs.chunk(world * args.k), ys.chunk(world * args.k)))[rank * args.k : (rank + 1) * args.k]
        total = torch.zeros((), dtype=dtype, device=device)
        for i, (xb, yb) in enumerate(pieces):
            model.set_requires_gradient_sync(i == args.k - 1)  # reduce-scatter on the last micro-step only
            loss = F.mse_loss(model(xb.to(device)), yb.to(device)) / args.k
            loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad()
        dist.all_reduce(total)
        losses.append(total.item() / world)

    local_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    full = [p.full_tensor().cpu() for p in model.parameters()]  # a collective: every rank calls it
    per_rank = [None] * world
    dist.all_gather_object(per_rank, local_bytes)
    if rank == 0:
        reference = one_process_reference(args, x, y, dtype)
        gap = max((a - b).abs().max().item() for a, b in zip(full, reference))
        result = {
            "world_size": world,
            "k": args.k,
            "losses": losses,
            "param_bytes_per_rank": per_rank,
            "param_bytes": sum(t.numel() * t.element_size() for t in full),
            "reduce_scatters_per_update": reduce_scatters[0] / args.steps,
            "block_forwards_per_micro_step": [n / (args.steps * args.k) for n in forwards],
            "max_diff_vs_large_batch": gap,
        }
        line = json.dumps(result)
        print(line)
        if args.out:
            with open(args.out, "w") as f:
                f.write(line + "\n")
    del model, opt, full
    gc.collect()  # free sharded state before the group goes (avoids an abort at exit)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Skip the interpreter's teardown: torch 2.13's gloo can abort there ("terminate called without
    # an active exception": a gloo thread frees a finished collective while Python shuts down),
    # about one run in 15 on a busy CPU, after the result is printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
