"""Local SGD on real ranks: each rank steps alone and the ranks average their parameters every
H steps, against DDP, which averages gradients at every step.

    from lab_utils.launch import launch
    from lab_utils.local_sgd import train, sweep
    r = launch(train, 2, kwargs=dict(method="local", H=8, steps=64))   # one run, every rank's dict
    r[0]["eval_loss"], r[0]["comm"]["bytes"], r[0]["synced_steps"]
    runs = launch(sweep, 2, kwargs=dict(Hs=[1, 8, 32], steps=64))[0]    # DDP + several H at once

    # the same function under torchrun (one machine; see lab_utils/run.py for several machines)
    torchrun --standalone --nproc_per_node=2 -m lab_utils.run lab_utils.local_sgd:train \\
        --kwargs '{"method": "local", "H": 8, "steps": 64}' --out result.json

Methods of ``train``: ``ddp`` (gradient all-reduce every step, DDP's comm hook counted),
``local`` (one ``all_reduce`` per parameter tensor every H steps, as Accelerate's ``LocalSGD``),
``post-local`` (DDP for ``warmup`` steps, then local steps under ``no_sync``; Lin et al. 2020),
``post-local-torch`` (the same with PyTorch's ``post_localSGD_hook`` + ``PostLocalSGDOptimizer``),
``diloco`` (inner optimizer for H steps, then an outer Nesterov SGD step on the averaged update;
Douillard et al. 2023). ``accelerate_run`` runs Accelerate's ``LocalSGD`` as its guide writes it.
Every function returns plain, JSON-able data: loss curves, counted communication, checksums.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lab_utils.comm import CommCounter
from lab_utils.data import classification
from lab_utils.launch import dist_info
from lab_utils.models import mlp

__all__ = [
    "METHODS",
    "OPTIMIZERS",
    "TASK",
    "make_model",
    "make_data",
    "rank_batches",
    "checksum",
    "rank_shard",
    "average_parameters",
    "train",
    "sweep",
    "accelerate_run",
    "accelerate_demos",
]

METHODS = ("ddp", "local", "post-local", "post-local-torch", "diloco")
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
# The lab task: 10 Gaussian blobs in 32 dimensions, an MLP of 11,082 parameters (44 KB of fp32).
TASK: dict[str, Any] = dict(dim=32, classes=10, width=64, depth=2, per_rank=1024, batch=32, eval_n=2048, skew=0.0)


# ----------------------------------------------------------------------------- the task
def make_model(
    *, dim: int = 32, classes: int = 10, width: int = 64, depth: int = 2, seed: int = 0, batchnorm: bool = False
) -> nn.Module:
    """The same MLP on every rank (same seed); ``batchnorm`` adds a layer with running buffers."""
    model = mlp(width, depth, in_dim=dim, out_dim=classes, seed=seed)
    if batchnorm:
        model.insert(1, nn.BatchNorm1d(width))
    return model


def make_data(
    world: int, *, dim: int = 32, classes: int = 10, per_rank: int = 1024, eval_n: int = 2048, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training set of ``per_rank * world`` samples and a held-out set of ``eval_n`` (same blobs)."""
    x, y = classification(per_rank * world + eval_n, dim=dim, n_classes=classes, seed=seed)
    n = per_rank * world
    return x[:n], y[:n], x[n:], y[n:]


def rank_shard(y: torch.Tensor, rank: int, world: int, skew: float = 0.0, seed: int = 0) -> torch.Tensor:
    """Indices of this rank's samples. ``skew=0``: every ``world``-th sample (the ranks see the same
    mix of classes); ``skew=1``: a sample of class c goes to rank ``c % world`` (each rank sees only
    its own classes); in between, that fraction of samples is placed by class, the rest in turn."""
    if not 0.0 <= skew <= 1.0:
        raise ValueError(f"skew={skew}: must lie in [0, 1] (0 = same data mix on every rank)")
    by_class = torch.rand(len(y), generator=torch.Generator().manual_seed(seed + 7)) < skew
    owner = torch.where(by_class, y % world, torch.arange(len(y)) % world)
    return torch.nonzero(owner == rank).flatten()


def rank_batches(
    x: torch.Tensor, y: torch.Tensor, rank: int, world: int, batch: int, steps: int, seed: int = 0, skew: float = 0.0
):
    """``steps`` batches from this rank's shard (see ``rank_shard``), reshuffled each epoch."""
    idx = rank_shard(y, rank, world, skew, seed)
    xs, ys = x[idx], y[idx]
    per_epoch = max(1, len(xs) // batch)
    for s in range(steps):
        epoch, i = divmod(s, per_epoch)
        if i == 0:
            order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        idx = order[i * batch : (i + 1) * batch]
        yield xs[idx], ys[idx]


def checksum(tensors) -> float:
    """One number that changes when any value changes: a sum of sin(i + x) in float64."""
    total = 0.0
    for t in tensors:
        flat = t.detach().double().flatten().cpu()
        total += torch.sin(flat + torch.arange(flat.numel(), dtype=torch.float64)).sum().item()
    return total


def average_parameters(model: nn.Module, flat: bool = False) -> None:
    """Replace every parameter by its mean over the ranks: one ``all_reduce`` per tensor, as
    Accelerate's ``LocalSGD`` does, or with ``flat=True`` one ``all_reduce`` of all parameters
    copied into one buffer, as PyTorch's ``PeriodicModelAverager`` (and DDP's buckets) do: the
    same bytes, but the link's latency is paid once instead of once per tensor."""
    world = dist.get_world_size()
    params = list(model.parameters())
    if flat:
        buf = torch.cat([p.data.flatten() for p in params])
        dist.all_reduce(buf)
        buf /= world
        torch.nn.utils.vector_to_parameters(buf, params)
        return
    for p in params:
        dist.all_reduce(p.data)
        p.data /= world


def _optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    raise ValueError(f"optimizer={name!r} is not one of {OPTIMIZERS}")


def _check(method: str, H: int, steps: int, warmup: int, optimizer: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {METHODS}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not one of {OPTIMIZERS}")
    if not (isinstance(H, int) and H >= 1):
        raise ValueError(f"H={H!r}: the number of local steps between averagings must be an int >= 1")
    if steps < 1 or not 0 <= warmup <= steps:
        raise ValueError(f"steps={steps}, warmup={warmup}: need steps >= 1 and 0 <= warmup <= steps")
    if not dist.is_initialized():
        raise RuntimeError(
            "train() runs on ranks: call it through lab_utils.launch(train, 2, kwargs=...) "
            "or torchrun -m lab_utils.run lab_utils.local_sgd:train"
        )


# ----------------------------------------------------------------------------- one run
def train(
    method: str = "local",
    *,
    H: int = 8,
    steps: int = 128,
    optimizer: str = "sgd",
    lr: float | None = None,
    warmup: int = 0,
    outer_lr: float = 0.7,
    outer_momentum: float = 0.9,
    flat: bool = False,
    seed: int = 0,
    eval_every: int | None = None,
    return_params: bool = False,
    **task: Any,
) -> dict:
    """Train the lab task on this rank with ``method`` (see the module docstring) for ``steps``
    optimizer steps and return plain data (``flat``: average parameters with one collective
    instead of one per tensor, see ``average_parameters``):

    ``losses`` (this rank's batch loss per step), ``eval_loss`` (held-out loss of the final model,
    after a last averaging at exit when ``steps`` is not a multiple of H), ``eval_curve`` ((step,
    held-out loss of the ranks' mean model) every ``eval_every`` steps), ``checksums`` (of the
    parameters after each step, averaging included), ``synced_steps`` (steps after which the
    parameters were averaged), ``comm`` (``CommCounter.summary()``), ``events`` (for
    ``simnet.simulate``), ``compute_s`` (measured seconds per step, communication excluded),
    ``opt_state_checksum``, ``param_bytes``, ``n_param_tensors``; ``params`` with ``return_params``.
    """
    _check(method, H, steps, warmup, optimizer)
    cfg = {**TASK, **task}
    lr = lr if lr is not None else (0.1 if optimizer in ("sgd", "momentum") else 3e-3)
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y, xe, ye = make_data(
        world, dim=cfg["dim"], classes=cfg["classes"], per_rank=cfg["per_rank"], eval_n=cfg["eval_n"], seed=seed
    )
    model = make_model(dim=cfg["dim"], classes=cfg["classes"], width=cfg["width"], depth=cfg["depth"], seed=seed)
    # NCCL ranks (one GPU each) train on their GPU; gloo ranks on the CPU. Data is made on the
    # CPU (same values everywhere) and moved batch by batch.
    dev = dist_info().device
    model, xe, ye = model.to(dev), xe.to(dev), ye.to(dev)
    counter = CommCounter()
    ddp = None
    if method in ("ddp", "post-local", "post-local-torch"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model)
        if method == "post-local-torch":
            from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
                PostLocalSGDState,
                post_localSGD_hook,
            )

            ddp.register_comm_hook(
                PostLocalSGDState(None, None, start_localSGD_iter=warmup, post_local_gradient_allreduce=False),
                post_localSGD_hook,
            )
        else:
            counter.attach(ddp)
    net = ddp if ddp is not None else model
    opt = _optimizer(optimizer, model.parameters(), lr)
    if method == "post-local-torch":
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        from torch.distributed.optim import PostLocalSGDOptimizer

        # PyTorch averages after steps warmup_steps, +period, ...; this warm-up puts its averagings
        # after steps warmup+H-1, warmup+2H-1, ... like the hand-written loop.
        opt = PostLocalSGDOptimizer(opt, PeriodicModelAverager(period=H, warmup_steps=warmup + H - 1))
    outer, outer_params, anchor = None, None, None
    if method == "diloco":
        anchor = [p.detach().clone() for p in model.parameters()]  # the global parameters
        outer_params = [nn.Parameter(a.clone()) for a in anchor]
        outer = torch.optim.SGD(
            outer_params, lr=outer_lr, momentum=outer_momentum, nesterov=outer_momentum > 0
        )  # outer_lr=1, momentum=0: plain averaging

    losses, sums, synced, compute_s, evals = [], [], [], [], []
    eval_every = eval_every if eval_every is not None else max(1, steps // 16)
    local_since_sync = 0
    averages = method in ("local", "post-local", "diloco")  # the hand-written averaging
    offset = warmup if method == "post-local" else 0  # local steps start after the warm-up
    with counter.track():
        for s, (xb, yb) in enumerate(rank_batches(x, y, rank, world, cfg["batch"], steps, seed, cfg["skew"])):
            xb, yb = xb.to(dev), yb.to(dev)
            t0 = time.perf_counter()
            local_phase = method in ("local", "diloco") or (method.startswith("post-local") and s >= warmup)
            if method == "post-local" and local_phase:
                with ddp.no_sync():  # forward inside no_sync too, or DDP still syncs
                    loss = F.cross_entropy(net(xb), yb)
                    opt.zero_grad()
                    loss.backward()
            else:
                loss = F.cross_entropy(net(xb), yb)
                opt.zero_grad()
                loss.backward()
            if method == "post-local-torch":
                compute_s.append(time.perf_counter() - t0)
                opt.step()  # PostLocalSGDOptimizer averages inside step()
                if s >= warmup + H - 1 and (s - warmup + 1) % H == 0:
                    synced.append(s)
            else:
                opt.step()
                compute_s.append(time.perf_counter() - t0)
            local_since_sync += local_phase
            if averages and local_phase and (s + 1 - offset) % H == 0:
                _sync(method, model, outer, outer_params, anchor, flat)
                synced.append(s)
                local_since_sync = 0
            losses.append(loss.item())
            sums.append(checksum(model.parameters()))
            if eval_every and (s + 1) % eval_every == 0:
                with counter.paused():  # bookkeeping, not part of the method's traffic
                    evals.append((s + 1, _eval_of_mean(model, xe, ye)))
            counter.mark_step()
        if averages and local_since_sync:
            # Average once more at exit, as Accelerate's LocalSGD does, so every rank ends equal.
            _sync(method, model, outer, outer_params, anchor, flat)
            synced.append(steps)
            counter.mark_step()
    with torch.no_grad():
        eval_loss = F.cross_entropy(model(xe), ye).item()
    state = [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    out = {
        "method": method,
        "H": H,
        "flat": flat,
        "optimizer": optimizer,
        "lr": lr,
        "warmup": warmup,
        "rank": rank,
        "world_size": world,
        "steps": steps,
        "losses": losses,
        "eval_loss": eval_loss,
        "eval_curve": evals,
        "checksums": sums,
        "final_checksum": checksum(model.parameters()),
        "synced_steps": synced,
        "comm": counter.summary(),
        "compute_s": compute_s,
        "events": [{"op": e.op, "nbytes": e.nbytes, "step": e.step, "source": e.source} for e in counter.events],
        "opt_state_checksum": checksum(state) if state else 0.0,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "n_param_tensors": len(list(model.parameters())),
    }
    if return_params:
        out["params"] = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    del ddp, net, model, opt, outer
    return out


def _eval_of_mean(model: nn.Module, xe: torch.Tensor, ye: torch.Tensor) -> float:
    """Held-out loss of the mean of the ranks' models (what averaging now would give)."""
    with torch.no_grad():
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        saved = [p.detach().clone() for p in model.parameters()]
        torch.nn.utils.vector_to_parameters(flat, model.parameters())
        loss = F.cross_entropy(model(xe), ye).item()
        for p, v in zip(model.parameters(), saved):
            p.copy_(v)
    return loss


def _sync(method, model, outer, outer_params, anchor, flat) -> None:
    if method != "diloco":
        average_parameters(model, flat)
        return
    # DiLoCo: the outer gradient is (global - local), averaged over ranks; a Nesterov SGD step on
    # the global parameters; every rank restarts its inner steps from the new global parameters.
    world = dist.get_world_size()
    for p, a, op in zip(model.parameters(), anchor, outer_params):
        delta = a - p.data
        dist.all_reduce(delta)
        op.grad = delta / world
    outer.step()
    for p, a, op in zip(model.parameters(), anchor, outer_params):
        a.copy_(op.data)
        p.data.copy_(op.data)


def sweep(
    Hs: Sequence[int] = (1, 2, 4, 8, 16, 32),
    *,
    steps: int = 128,
    optimizer: str = "sgd",
    include_ddp: bool = True,
    extra: Sequence[dict] = (),
    **kwargs: Any,
) -> dict[str, dict]:
    """Several runs in one launch (start-up paid once): ``DDP`` and ``H=<h>`` for each h, plus
    ``extra`` runs given as dicts of ``train`` arguments with a ``name``. Each entry holds
    rank 0's result with ``losses`` averaged over the ranks, the final checksum of every rank
    (``rank_checksums``), every rank's checksum after each step (``rank_step_checksums``), the
    final ``params`` (a flat list) and ``max_diff_to_ddp``: the largest parameter difference to the DDP run."""
    runs: dict[str, dict] = {}
    plan = [("DDP", dict(method="ddp"))] if include_ddp else []
    plan += [(f"H={h}", dict(method="local", H=h)) for h in Hs]
    plan += [(e["name"], {k: v for k, v in e.items() if k != "name"}) for e in extra]
    ref = None
    for name, args in plan:
        r = train(**{**dict(steps=steps, optimizer=optimizer, **kwargs), **args}, return_params=True)
        params = torch.tensor(r["params"])
        ref = params if name == "DDP" else ref
        r["max_diff_to_ddp"] = (params - ref).abs().max().item() if ref is not None else float("nan")
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (r["losses"], r["final_checksum"], r["compute_s"], r["checksums"]))
        r["losses"] = torch.tensor([g[0] for g in gathered]).mean(0).tolist()
        r["rank_checksums"] = [g[1] for g in gathered]
        r["rank_step_checksums"] = [g[3] for g in gathered]
        r["compute_s"] = torch.tensor([g[2] for g in gathered]).max(0).values.tolist()  # slowest rank
        runs[name] = r
    return runs


# ----------------------------------------------------------------------------- Accelerate
def accelerate_run(
    *,
    local_sgd_steps: int = 8,
    accumulation: int = 2,
    micro_batches: int = 32,
    count: str = "micro-batch",
    enabled: bool = True,
    use_local_sgd: bool = True,
    batchnorm: bool = False,
    lr: float = 0.1,
    seed: int = 0,
    **task: Any,
) -> dict:
    """Accelerate's ``LocalSGD`` loop exactly as its guide writes it, on this rank.

    ``count="micro-batch"``: ``local_sgd.step()`` after every micro-batch, as in the guide (it then
    counts micro-batches); ``count="update"``: only when ``accelerator.sync_gradients`` (counts
    optimizer updates). ``use_local_sgd=False`` runs the plain accumulation loop (DDP sync on
    update steps). Returns ``events`` (each collective with the micro-batch it fell in),
    ``averagings`` (micro-batch index of each parameter averaging and whether it fell on an
    update boundary), ``sync_flags`` (``sync_gradients`` per micro-batch), checksums of
    parameters and buffers, ``num_processes``, ``local_sgd_enabled``."""
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD

    if count not in ("micro-batch", "update"):
        raise ValueError(f"count={count!r}: use 'micro-batch' (the guide's loop) or 'update'")
    cfg = {**TASK, **task}
    world = dist.get_world_size() if dist.is_initialized() else 1
    # On CPU the Accelerator must be told so; without cpu=True each process would run alone.
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), gradient_accumulation_steps=accumulation)
    if accelerator.num_processes != world:
        raise RuntimeError(
            f"Accelerator sees {accelerator.num_processes} process(es) but torch.distributed "
            f"has {world}: create Accelerator(cpu=True) inside the rank function (on CPU), "
            f"after the process group exists"
        )
    x, y, _, _ = make_data(
        world,
        dim=cfg["dim"],
        classes=cfg["classes"],
        per_rank=max(cfg["per_rank"], micro_batches * cfg["batch"]),
        eval_n=16,
        seed=seed,
    )
    n = micro_batches * cfg["batch"] * world
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:n], y[:n]), batch_size=cfg["batch"])
    model = make_model(
        dim=cfg["dim"], classes=cfg["classes"], width=cfg["width"], depth=cfg["depth"], seed=seed, batchnorm=batchnorm
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    counter = CommCounter()
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        counter.attach(model)
    losses, flags = [], []
    ctx = (
        LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=enabled)
        if use_local_sgd
        else None
    )
    with counter.track():
        local_sgd = ctx.__enter__() if ctx else None
        try:
            for inputs, targets in loader:  # the guide's loop, line for line
                with accelerator.accumulate(model):
                    outputs = model(inputs)
                    loss = F.cross_entropy(outputs, targets)
                    accelerator.backward(loss)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                    flags.append(accelerator.sync_gradients)
                    if local_sgd is not None and (count == "micro-batch" or accelerator.sync_gradients):
                        local_sgd.step()
                losses.append(loss.item())
                counter.mark_step()
        finally:
            if ctx:
                ctx.__exit__(None, None, None)  # averages once more at exit
    events = [{"op": e.op, "nbytes": e.nbytes, "step": e.step, "source": e.source} for e in counter.events]
    n_tensors = len(list(model.parameters()))
    direct = [e for e in events if e["source"] == "torch.distributed"]
    # Consecutive runs of n_tensors direct all-reduces are one averaging of the model.
    avg_steps = [direct[i]["step"] for i in range(0, len(direct), n_tensors)]
    inner = accelerator.unwrap_model(model)
    out = {
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "local_sgd_enabled": bool(local_sgd.enabled) if local_sgd else False,
        "local_sgd_steps": local_sgd_steps,
        "accumulation": accumulation,
        "count": count,
        "micro_batches": len(flags),
        "updates": sum(flags),
        "sync_flags": flags,
        "losses": losses,
        "events": events,
        "n_param_tensors": n_tensors,
        "param_bytes": sum(p.numel() * p.element_size() for p in inner.parameters()),
        "averagings": [
            {"micro_batch": st, "on_update_boundary": st >= len(flags) or bool(flags[st])} for st in avg_steps
        ],
        "param_checksum": checksum(inner.parameters()),
        "buffer_checksum": checksum(b for b in inner.buffers() if b.is_floating_point()),
        "buffers": {k: v.tolist() for k, v in inner.state_dict().items() if "running" in k},
        "rank": accelerator.process_index,
    }
    del model, optimizer, loader, scheduler, inner, local_sgd, ctx
    accelerator.free_memory()
    return out


def accelerate_demos(configs: dict[str, dict]) -> dict[str, dict]:
    """Several ``accelerate_run`` configurations in one launch: ``{name: kwargs}`` -> ``{name: result}``."""
    return {name: accelerate_run(**kw) for name, kw in configs.items()}


# ----------------------------------------------------------------------------- analysis
def compute_per_step(runs: dict[str, dict]) -> float:
    """Median measured compute seconds per step over all runs (every method does the same
    forward/backward/step, so one number is fairer than each run's noisy own)."""
    times = sorted(t for r in runs.values() for t in r["compute_s"])
    if not times:
        raise ValueError("no run holds compute_s: pass the dict that sweep() returned")
    return times[len(times) // 2]


def simulated_seconds(run: dict, link: Any, world_size: int, step_seconds: float) -> list[float]:
    """Cumulative seconds after each step: ``step_seconds`` of compute (measured) plus the
    simulated time of the collectives counted in that step on ``link`` (``simnet.Link``)."""
    from lab_utils.simnet import simulate

    comm = simulate(run["events"], link, world_size)
    out, t = [], 0.0
    for s in range(run["steps"]):
        t += step_seconds + (comm[s] if s < len(comm) else 0.0)
        out.append(t)
    if out:
        out[-1] += sum(comm[run["steps"] :])  # the averaging at exit
    return out


def rank_spread(run: dict) -> list[float]:
    """Per step, the largest difference between the ranks' parameter checksums (0 when equal)."""
    per_rank = run["rank_step_checksums"]
    return [max(c) - min(c) for c in zip(*per_rank)]


# ----------------------------------------------------------------------------- exercises
def check_bytes(answer: Any, runs: dict[str, dict], H: int) -> None:
    """Exercise: bytes one rank sends for parameter averaging in the ``H=<H>`` run."""
    from lab_utils.checks import check

    r = runs[f"H={H}"]
    counted = r["comm"]["bytes"]
    check(
        answer is not None and int(answer) == counted,
        f"H={H}: (steps / H) averagings x parameter bytes = the bytes the counter saw",
        hint="one averaging sends every parameter once: param_bytes; how many averagings in steps?",
    )


def check_momentum(answer: Any, runs: dict[str, dict]) -> None:
    """Exercise: does SGD with momentum at H=1 equal DDP with momentum?"""
    from lab_utils.checks import check

    a, b = runs["momentum H=1"], runs["momentum DDP"]
    if (a["optimizer"], b["optimizer"], a["H"], b["method"]) != ("momentum", "momentum", 1, "ddp"):
        raise ValueError("runs needs 'momentum H=1' (local, H=1) and 'momentum DDP' runs with optimizer='momentum'")
    same = (torch.tensor(a["params"]) - torch.tensor(b["params"])).abs().max().item() < 1e-5
    check(
        isinstance(answer, bool) and answer == same,
        f"momentum SGD at H=1 {'equals' if same else 'differs from'} DDP (measured)",
        hint="is the momentum update linear in the gradient? then the mean of the ranks' updates "
        "is the update of the mean gradient",
    )


def check_averagings(answer: Any, result: dict) -> None:
    """Exercise: (averagings, of which inside an accumulation window) of an Accelerate run."""
    from lab_utils.checks import check

    avgs = result["averagings"]
    truth = (len(avgs), sum(not a["on_update_boundary"] for a in avgs))
    check(
        isinstance(answer, tuple) and tuple(answer) == truth,
        f"{truth[0]} averagings (one at exit), {truth[1]} inside an accumulation window",
        hint="step() counts calls; one call per micro-batch; an averaging every local_sgd_steps "
        "calls, plus one at exit; it lands mid-window unless the call count is a multiple of "
        "the accumulation steps",
    )


def check_floor(
    answer: Any, runs: dict[str, dict], link: Any, world_size: int, step_seconds: float, Hs: Sequence[int]
) -> None:
    """Exercise: the smallest H whose simulated run time is within 10% of the compute floor."""
    from lab_utils.checks import check

    floor = step_seconds * next(iter(runs.values()))["steps"]
    truth = next(
        (h for h in Hs if simulated_seconds(runs[f"H={h}"], link, world_size, step_seconds)[-1] <= 1.1 * floor), None
    )
    check(
        answer == truth,
        f"on {link.name}, your H is the smallest within 10% of the compute floor",
        hint="total time = steps x compute per step + the simulated time of the counted collectives",
    )
