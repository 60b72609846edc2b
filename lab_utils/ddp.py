"""Gradient accumulation under DDP on real ranks: naive, ``no_sync``, and the forward-outside mistake.

    from lab_utils import launch
    from lab_utils.ddp import compare_modes, large_batch_reference
    res = launch(compare_modes, 2, kwargs={"k": 4})       # a list: one dict per rank
    res[0]["modes"]["no_sync"]["collectives_per_update"]    # [1, 1]: one bucket, one sync per update
    ref = large_batch_reference(k=4, world_size=2)          # one process, one batch 2 x 4 x 16

The same functions run on the multi-machine path, because they read rank and world size from
``torch.distributed`` (here one node with 2 processes; see ``lab_utils.run`` for two machines):

    torchrun --standalone --nproc_per_node=2 -m lab_utils.run lab_utils.ddp:compare_modes \\
        --kwargs '{"k": 4, "return_params": false}' --out result.json

Functions that run on every rank of a process group: ``compare_modes`` / ``run_mode`` (the three
loops, with a counting comm hook), ``reducer_probe`` (DDP's flags and the reducer calls around
``no_sync``), ``bucket_counts`` (all-reduces per backward for several ``bucket_cap_mb``),
``inside_ddp`` (those two in one launch) and ``time_sweep`` (time per update as K grows). ``large_batch_reference``, ``predict_buckets`` and
``simulated_update_seconds`` run in one ordinary process.

Every run shares one setup (``SETUP``): an MLP (``models.mlp``) on a seeded regression, micro-batch
``micro_batch`` per rank. The sample order is fixed so that update ``u`` of the DDP run sees
exactly the samples of the large batch ``u`` of the single-process reference.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from lab_utils import data, models
from lab_utils.comm import CommCounter
from lab_utils.launch import dist_info
from lab_utils.timing import Timer

__all__ = [
    "MODES",
    "SETUP",
    "make_model",
    "dataset",
    "micro_batches",
    "param_bytes",
    "accumulation_update",
    "run_mode",
    "compare_modes",
    "large_batch_reference",
    "ReducerSpy",
    "reducer_probe",
    "SCENARIOS",
    "bucket_counts",
    "inside_ddp",
    "predict_buckets",
    "time_sweep",
    "simulated_update_seconds",
    "flat_params",
    "digest",
]

MODES = ("naive", "no_sync", "forward_outside")
"""``naive``: every micro-step's backward all-reduces; ``no_sync``: the first K-1 micro-steps run
forward and backward inside ``ddp.no_sync()``; ``forward_outside``: only the backward is inside
``no_sync()`` (a common mistake). ``accumulation_update`` also accepts ``local`` (every micro-step
inside ``no_sync``, no communication at all), used only to time the computation alone."""

SETUP: dict[str, Any] = {"dim": 32, "width": 256, "depth": 4, "micro_batch": 16, "lr": 0.05, "seed": 0}
"""The model and data every function builds unless told otherwise (keyword arguments override)."""


def _setup(overrides: dict[str, Any]) -> dict[str, Any]:
    unknown = set(overrides) - set(SETUP)
    if unknown:
        raise TypeError(f"unknown setting(s) {sorted(unknown)}; the settings are {sorted(SETUP)}")
    return {**SETUP, **overrides}


# ----------------------------------------------------------------------------- model and data
def make_model(dim: int = 32, width: int = 256, depth: int = 4, seed: int = 0, **_: Any) -> nn.Sequential:
    """Linear(dim, width) -> depth x [Linear(width, width) + GELU] -> Linear(width, 1)."""
    return models.mlp(width, depth, in_dim=dim, out_dim=1, seed=seed)


def param_bytes(model: nn.Module) -> list[int]:
    """Bytes of each parameter, in registration order (the order ``model.parameters()`` gives)."""
    return [p.numel() * p.element_size() for p in model.parameters()]


def dataset(n_samples: int, dim: int = 32, seed: int = 0, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeded regression every run draws from (``data.regression``)."""
    return data.regression(n=n_samples, dim=dim, seed=seed + 1)


def micro_batches(
    x: torch.Tensor, y: torch.Tensor, update: int, *, k: int, rank: int, world_size: int, micro_batch: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The K micro-batches of ``rank`` for ``update``. Update ``u`` of all ranks together covers
    samples ``u*K*W*mb`` to ``(u+1)*K*W*mb``: the large batch of the reference run."""
    out = []
    for i in range(k):
        start = ((update * k + i) * world_size + rank) * micro_batch
        out.append((x[start : start + micro_batch], y[start : start + micro_batch]))
    return out


def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters in one flat float64 CPU tensor."""
    return torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])


def digest(t: torch.Tensor) -> str:
    """A short hash of a tensor's exact bits: equal digests mean bit-identical values."""
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


# ----------------------------------------------------------------------------- the loops
def accumulation_update(
    ddp: DDP,
    optimizer: torch.optim.Optimizer,
    micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    mode: str = "no_sync",
) -> None:
    """One optimizer update from K micro-batches; ``mode`` (see ``MODES``) says where to synchronise."""
    if mode not in MODES + ("local",):
        raise ValueError(f"mode={mode!r} is not one of {MODES + ('local',)}")
    k = len(micro_batches)
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        if mode == "naive" or (last and mode != "local"):
            loss = F.mse_loss(ddp(x), y) / k  # DDP all-reduces in this backward
            loss.backward()
        elif mode in ("no_sync", "local"):
            with ddp.no_sync():  # forward AND backward inside: no all-reduce
                loss = F.mse_loss(ddp(x), y) / k
                loss.backward()
        elif mode == "forward_outside":
            loss = F.mse_loss(ddp(x), y) / k  # this forward already armed the reducer...
            with ddp.no_sync():
                loss.backward()  # ...so this backward all-reduces anyway
    optimizer.step()


def _wrap(model: nn.Module, bucket_cap_mb: float | None) -> DDP:
    info = dist_info()
    model = model.to(info.device)
    ids = [info.device.index] if info.device.type == "cuda" else None
    return DDP(model, device_ids=ids, bucket_cap_mb=bucket_cap_mb)


def run_mode(
    mode: str | Callable = "no_sync",
    k: int = 4,
    *,
    updates: int = 2,
    bucket_cap_mb: float | None = 25,
    return_params: bool = True,
    **setup: Any,
) -> dict[str, Any]:
    """Train ``updates`` updates of K micro-steps on this rank, counting DDP's all-reduces.

    ``mode`` is one of ``MODES`` or a function ``(ddp, optimizer, micro_batches) -> None`` doing one
    update (an exercise's loop). Returns plain data: collectives and bytes per update, the seconds
    of each update, the bucket sizes of the last update, a digest of the final parameters, and the
    parameters themselves (a CPU tensor) when ``return_params``."""
    if k < 1 or updates < 1:
        raise ValueError(f"k={k}, updates={updates}: both must be >= 1")
    s = _setup(setup)
    info = dist_info()
    torch.manual_seed(s["seed"])
    ddp = _wrap(make_model(**s), bucket_cap_mb)
    counter = CommCounter().attach(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=s["lr"])
    x, y = dataset(updates * k * info.world_size * s["micro_batch"], **s)
    step = mode if callable(mode) else (lambda d, o, mb: accumulation_update(d, o, mb, mode))
    seconds = []
    for u in range(updates):
        mbs = [
            (a.to(info.device), b.to(info.device))
            for a, b in micro_batches(
                x, y, u, k=k, rank=info.rank, world_size=info.world_size, micro_batch=s["micro_batch"]
            )
        ]
        with Timer() as t:
            step(ddp, opt, mbs)
        seconds.append(t.seconds)
        counter.mark_step()
    summary = counter.summary()
    params = flat_params(ddp.module)
    out = {
        "mode": mode if isinstance(mode, str) else getattr(mode, "__name__", "custom"),
        "k": k,
        "world_size": info.world_size,
        "backend": info.backend,
        "updates": updates,
        "collectives_per_update": [p["collectives"] for p in summary["per_step"]],
        "bytes_per_update": [p["bytes"] for p in summary["per_step"]],
        "bucket_bytes_last_update": [e.nbytes for e in counter.events if e.step == updates - 1],
        "param_bytes": sum(param_bytes(ddp.module)),
        "seconds_per_update": seconds,
        "digest": digest(params),
        "checksum": params.sum().item(),
    }
    if return_params:
        out["params"] = params
    del ddp, opt, counter
    return out


def compare_modes(
    k: int = 4,
    modes: Sequence[str] = MODES,
    *,
    updates: int = 2,
    bucket_cap_mb: float | None = 25,
    return_params: bool = True,
    **setup: Any,
) -> dict[str, Any]:
    """``run_mode`` for each of ``modes`` in one process group (one launch for all of them).
    Returns ``{"modes": {mode: result}, "world_size": ..., "backend": ...}``."""
    info = dist_info()
    res = {
        m: run_mode(m, k, updates=updates, bucket_cap_mb=bucket_cap_mb, return_params=return_params, **setup)
        for m in modes
    }
    return {"modes": res, "world_size": info.world_size, "backend": info.backend, "k": k}


def large_batch_reference(k: int = 4, world_size: int = 2, *, updates: int = 2, **setup: Any) -> torch.Tensor:
    """One process, no DDP: ``updates`` SGD steps on batches of ``world_size * k * micro_batch``
    samples (the same samples, in the same updates, as the DDP runs). Returns the flat parameters."""
    s = _setup(setup)
    torch.manual_seed(s["seed"])
    model = make_model(**s)
    opt = torch.optim.SGD(model.parameters(), lr=s["lr"])
    big = world_size * k * s["micro_batch"]
    x, y = dataset(updates * big, **s)
    for u in range(updates):
        opt.zero_grad()
        F.mse_loss(model(x[u * big : (u + 1) * big]), y[u * big : (u + 1) * big]).backward()
        opt.step()
    return flat_params(model)


# ----------------------------------------------------------------------------- inside DDP
class ReducerSpy:
    """Stands in for ``ddp.reducer`` and logs the calls DDP's Python ``forward`` makes on it
    (``prepare_for_forward``, ``prepare_for_backward``); everything else goes to the real reducer.
    ``prepare_for_backward`` is the call that sets the C++ flag ``expect_autograd_hooks_``."""

    def __init__(self, reducer: Any):
        self._reducer = reducer
        self.calls: list[str] = []

    def prepare_for_forward(self, *args: Any) -> Any:
        self.calls.append("prepare_for_forward")
        return self._reducer.prepare_for_forward(*args)

    def prepare_for_backward(self, *args: Any) -> Any:
        self.calls.append("prepare_for_backward")
        return self._reducer.prepare_for_backward(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


SCENARIOS: dict[str, tuple[bool, bool, bool]] = {
    # name: (forward inside no_sync, backward inside no_sync, zero the grads first)
    "plain step": (False, False, True),
    "forward + backward inside no_sync": (True, True, True),
    "forward outside, backward inside": (False, True, True),
    "forward inside, backward outside": (True, False, True),
    "plain step after it (grads kept)": (False, False, False),
}
"""The micro-steps ``reducer_probe`` runs, in this order. The last one does not zero the
gradients, so it synchronises what the unsynchronised step before it accumulated as well."""


def reducer_probe(bucket_cap_mb: float | None = 25, **setup: Any) -> list[dict[str, Any]]:
    """Run each of ``SCENARIOS`` once and observe, live: ``require_backward_grad_sync`` at forward
    and at backward time, whether forward called ``prepare_for_backward`` (arming the reducer),
    ``require_forward_param_sync`` after forward, how many gradient (autograd) hooks fired, how
    many times the comm hook ran (= bucket all-reduces), and whether the ranks' ``.grad`` agree."""
    s = _setup(setup)
    info = dist_info()
    ddp = _wrap(make_model(**s), bucket_cap_mb)
    counter = CommCounter().attach(ddp)
    spy = ReducerSpy(ddp.reducer)
    ddp.reducer = spy
    fired = [0]
    handles = [
        p.register_post_accumulate_grad_hook(lambda _p: fired.__setitem__(0, fired[0] + 1))
        for p in ddp.module.parameters()
    ]
    g = torch.Generator().manual_seed(100 + info.rank)  # different data on each rank
    rows = []
    for name, (fwd_in, bwd_in, zero) in SCENARIOS.items():
        if zero:
            ddp.zero_grad(set_to_none=True)
        x = torch.randn(s["micro_batch"], s["dim"], generator=g).to(info.device)
        spy.calls.clear()
        with ddp.no_sync() if fwd_in else nullcontext():
            flag_fwd = ddp.require_backward_grad_sync
            loss = ddp(x).pow(2).mean()
            armed = "prepare_for_backward" in spy.calls
            param_sync = ddp.require_forward_param_sync
        fired[0], before = 0, len(counter.events)
        with ddp.no_sync() if bwd_in else nullcontext():
            flag_bwd = ddp.require_backward_grad_sync
            loss.backward()
        grads = torch.cat([p.grad.flatten() for p in ddp.module.parameters()])
        everyone = [torch.empty_like(grads) for _ in range(info.world_size)]
        dist.all_gather(everyone, grads)
        rows.append(
            {
                "scenario": name,
                "flag_at_forward": flag_fwd,
                "prepare_for_backward": armed,
                "forward_param_sync": param_sync,
                "flag_at_backward": flag_bwd,
                "grad_hooks": fired[0],
                "comm_hook_calls": len(counter.events) - before,
                "grads_equal": all(torch.equal(everyone[0], t) for t in everyone[1:]),
            }
        )
    for h in handles:
        h.remove()
    ddp.reducer = spy._reducer
    del ddp, spy, counter
    return rows


def bucket_counts(caps: Sequence[float | None] = (None, 25, 1, 0.25), steps: int = 3, **setup: Any) -> dict[str, Any]:
    """For each ``bucket_cap_mb`` in ``caps`` (None = DDP's default), a fresh DDP model runs
    ``steps`` plain forward/backward steps; returns the all-reduces of each backward and the bytes
    of each bucket, keyed by ``str(cap)``, plus the parameters' sizes in registration order."""
    s = _setup(setup)
    info = dist_info()
    out: dict[str, Any] = {"per_step": {}, "bucket_bytes": {}, "param_bytes": param_bytes(make_model(**s))}
    g = torch.Generator().manual_seed(200 + info.rank)
    for cap in caps:
        ddp = _wrap(make_model(**s), cap)
        counter = CommCounter().attach(ddp)
        for _ in range(steps):
            x = torch.randn(s["micro_batch"], s["dim"], generator=g).to(info.device)
            ddp(x).pow(2).mean().backward()
            counter.mark_step()
        out["per_step"][str(cap)] = [p["collectives"] for p in counter.summary()["per_step"]]
        out["bucket_bytes"][str(cap)] = [[e.nbytes for e in counter.events if e.step == st] for st in range(steps)]
        del ddp, counter
    return out


def inside_ddp(caps: Sequence[float | None] = (None, 25, 1, 0.25), steps: int = 3, **setup: Any) -> dict[str, Any]:
    """``reducer_probe`` and ``bucket_counts`` in one launch: ``{"probe": rows, "buckets": ...}``."""
    return {"probe": reducer_probe(**setup), "buckets": bucket_counts(caps, steps, **setup)}


def predict_buckets(sizes: Sequence[int], cap_bytes: int, *, first_cap_bytes: int | None = None) -> list[int]:
    """The reducer's greedy bucketing: walk the gradients in the order they become ready (for a
    sequential model, ``sizes`` reversed), add each to the open bucket, close the bucket once it
    holds at least its limit (``first_cap_bytes`` for the first, ``cap_bytes`` after).
    Returns the bytes of each bucket. (DDP's default: 1 MiB first, 25 MiB after, but only from
    the second iteration on; the first backward puts every gradient in one bucket.)"""
    buckets, current = [], 0
    limit = cap_bytes if first_cap_bytes is None else first_cap_bytes
    for n in sizes:
        current += n
        if current >= limit:
            buckets.append(current)
            current, limit = 0, cap_bytes
    if current:
        buckets.append(current)
    return buckets


# ----------------------------------------------------------------------------- time
def time_sweep(
    ks: Sequence[int] = (1, 2, 4, 8), *, updates: int = 3, bucket_cap_mb: float | None = None, **setup: Any
) -> dict[str, Any]:
    """Compute time and collectives of one update, for each K in ``ks``.

    Compute: every micro-step is timed on its own inside ``no_sync`` (no communication at all),
    ``updates`` x max(ks) of them, and so is the optimizer step; one update's compute is then
    ``K x fastest micro-step + fastest optimizer step``. (The fastest of many short samples is the
    least disturbed estimate on a machine other programs share; timing whole updates there mixes
    in whatever else ran.) Also per K: the collectives (op, bytes) of one ``naive`` and one
    ``no_sync`` update, and the measured seconds of those updates on this process group (the
    fastest of ``updates``; on one machine their all-reduces go through loopback, not a network).
    One warm-up update first, so the buckets are rebuilt before anything is timed or counted."""
    s = _setup(setup)
    info = dist_info()
    torch.manual_seed(s["seed"])
    ddp = _wrap(make_model(**s), bucket_cap_mb)
    counter = CommCounter().attach(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    kmax = max(ks)
    x, y = dataset(kmax * info.world_size * s["micro_batch"], **s)
    mbs_all = [
        (a.to(info.device), b.to(info.device))
        for a, b in micro_batches(
            x, y, 0, k=kmax, rank=info.rank, world_size=info.world_size, micro_batch=s["micro_batch"]
        )
    ]
    accumulation_update(ddp, opt, mbs_all[:2], "naive")  # warm-up, bucket rebuild
    micro_s, step_s = [], []
    for _ in range(updates):
        opt.zero_grad(set_to_none=True)
        for xb, yb in mbs_all:
            with Timer() as t, ddp.no_sync():
                (F.mse_loss(ddp(xb), yb) / kmax).backward()
            micro_s.append(t.seconds)
        with Timer() as t:
            opt.step()
        step_s.append(t.seconds)
    rows = []
    for k in ks:
        row: dict[str, Any] = {"k": k, "compute_s": k * min(micro_s) + min(step_s)}
        for mode in ("naive", "no_sync"):
            times = []
            for _ in range(updates):
                counter.reset()
                with Timer() as t:
                    accumulation_update(ddp, opt, mbs_all[:k], mode)
                times.append(t.seconds)
            row[f"{mode}_s"] = min(times)
            row[f"{mode}_events"] = [{"op": e.op, "nbytes": e.nbytes, "step": 0} for e in counter.events]
        rows.append(row)
    del ddp, opt, counter
    return {
        "rows": rows,
        "micro_step_s": min(micro_s),
        "optimizer_step_s": min(step_s),
        "world_size": info.world_size,
        "backend": info.backend,
    }


def simulated_update_seconds(sweep: dict[str, Any], link: Any, world_size: int | None = None) -> dict[str, list[float]]:
    """Measured compute per update plus the *simulated* time of the collectives each update made
    on ``link`` (``lab_utils.simnet``), per K: ``{"k", "compute", "naive", "no_sync"}``."""
    from lab_utils.simnet import simulate

    w = world_size or sweep["world_size"]
    out: dict[str, list[float]] = {"k": [], "compute": [], "naive": [], "no_sync": []}
    for row in sweep["rows"]:
        out["k"].append(row["k"])
        out["compute"].append(row["compute_s"])
        for mode in ("naive", "no_sync"):
            comm = sum(simulate(row[f"{mode}_events"], link, w))
            out[mode].append(row["compute_s"] + comm)
    return out
