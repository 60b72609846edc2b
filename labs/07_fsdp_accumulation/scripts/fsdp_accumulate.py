"""Lab 7 as a script: FSDP2 with gradient accumulation and activation checkpointing, on N processes.

Run it from the repository root (two processes on one machine; CPU with gloo, or one GPU each):

    torchrun --standalone --nproc_per_node=2 labs/07_fsdp_accumulation/scripts/fsdp_accumulate.py --steps 5 --k 4

On two machines, start the same command on each with --nnodes=2 --node_rank=<0|1>
--rdzv_backend=static --master_addr=<address of node 0> --master_port=29500 instead of
--standalone (node 0 then holds rank 0, the one that prints; see README, "Beyond one machine").

On GPUs it trains float32 parameters with bfloat16 compute and float32 gradient reductions
(FSDP2's ``MixedPrecisionPolicy``: ``--dtype auto --mp auto``, the defaults); on CPU the defaults
are float64 without a policy, for the exact check against one process. ``--dtype float64 --mp none``
forces the exact run on GPUs too.

What it does: a model of blocks (Linear + GELU), each block checkpointed and then sharded with
``fully_shard`` (inner blocks first, the root last); each optimizer update runs ``--k``
micro-steps, gradient sync off on all but the last (``set_requires_gradient_sync``). With
``--gather-once`` each block is also all-gathered once per update instead of twice per micro-step:
``set_reshard_after_forward(False)`` keeps it gathered through its backward, and
``set_reshard_after_backward`` only on the last micro-step keeps it through the update (the whole
model gathered meanwhile: memory for traffic); this is an answer to the lab's exercise 2. Rank 0
prints one JSON line (world size, loss per update, parameter bytes per rank, the reduce-scatters
and all-gathers each update made, how many times each block's forward ran per micro-step (2 when it is
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
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
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
    parser.add_argument("--dtype", choices=("auto", "float64", "float32"), default="auto", help="parameters' dtype")
    parser.add_argument("--mp", choices=("auto", "none", "bf16"), default="auto", help="bf16: bfloat16 compute")
    parser.add_argument("--gather-once", action="store_true", help="all-gather each block once per update")
    parser.add_argument("--out", help="also write rank 0's JSON line to this file")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if use_cuda:  # before the process group: NCCL then binds each rank to its own GPU
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.dtype == "auto":  # GPUs: float32 parameters under a bf16 policy; CPU: float64, exact
        args.dtype = "float32" if use_cuda else "float64"
    if args.mp == "auto":
        args.mp = "bf16" if use_cuda and args.dtype == "float32" else "none"
    dtype = getattr(torch, args.dtype)
    if args.mp == "bf16" and dtype != torch.float32:
        parser.error("--mp bf16 keeps float32 parameters: add --dtype float32")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.mp == "bf16" else None
    shard_kw = {"mp_policy": mp} if mp is not None else {}

    model = build(args.width, args.depth, dtype)
    for i, block in enumerate(model):  # 1. checkpoint each block ...
        model[i] = Checkpointed(block)
    mesh = init_device_mesh(device.type, (world,))
    for block in model:  # 2. ... then shard each block (one all-gather unit each) ...
        fully_shard(block, mesh=mesh, **shard_kw)
    fully_shard(model, mesh=mesh, **shard_kw)  # 3. ... and the root last
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)  # built on the shards

    forwards = [0] * args.depth  # each block's forward calls (started: a recompute may stop early), recomputes included
    for i, ckpt in enumerate(model):
        ckpt.block.register_forward_pre_hook(lambda *_, i=i: forwards.__setitem__(i, forwards[i] + 1))
    reduce_scatters = count_calls(dist, "reduce_scatter_single")
    all_gathers = count_calls(dist, "all_gather_single")

    x, y = data(args, world, dtype)
    losses = []
    for xs, ys in zip(x.chunk(args.steps), y.chunk(args.steps)):
        pieces = list(zip(xs.chunk(world * args.k), ys.chunk(world * args.k)))[rank * args.k : (rank + 1) * args.k]
        total = torch.zeros((), dtype=dtype, device=device)
        if args.gather_once:
            model.set_reshard_after_forward(False)  # keep each block gathered through its backward
        for i, (xb, yb) in enumerate(pieces):
            last = i == args.k - 1
            model.set_requires_gradient_sync(last)  # reduce-scatter on the last micro-step only
            if args.gather_once:
                model.set_reshard_after_backward(last)  # and through the update; freed after the last
            loss = F.mse_loss(model(xb.to(device)), yb.to(device)) / args.k
            loss.backward()
            total += loss.detach().to(dtype)
        if args.gather_once:
            model.set_reshard_after_forward(True)  # back as fully_shard left the blocks (the root has none)
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
            "all_gathers_per_update": all_gathers[0] / args.steps,
            "mixed_precision": args.mp,
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
