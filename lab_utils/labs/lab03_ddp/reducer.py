"""What DDP's reducer does around ``no_sync()``, observed live on every rank.

    from lab_utils import launch
    from lab_utils.labs.lab03_ddp import reducer
    rows = launch(reducer.probe, 2)[0]      # one dict per scenario of ``SCENARIOS`` (rank 0)

``ReducerSpy`` stands in for ``ddp.reducer`` and records the calls DDP's Python forward makes on
it; ``probe`` runs one micro-step per scenario and records the flag, the reducer calls, the
gradient hooks that fired, the reducer's own hook at work (profiler), the comm hook's all-reduces
and whether the ranks' ``.grad`` agree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from lab_utils.comm import CommCounter
from lab_utils.env import dist_info, quiet_native_output
from lab_utils.flat import flat
from lab_utils.labs.lab03_ddp.workload import DEFAULT, Setup, model, wrap

__all__ = ["ReducerSpy", "SCENARIOS", "REDUCER_EVENTS", "Observed", "probe", "quiet_profile"]

REDUCER_EVENTS = ("torch::distributed::reducer::copy_", "torch::distributed::reducer::mul_out")
"""Profiler records of the reducer's own autograd hook at work: one per gradient it copies into
its bucket (``Reducer::mark_variable_ready``, torch 2.13: a plain copy when a comm hook is
registered, a copy scaled by 1/world size otherwise). An unarmed
reducer's hook returns before it, so none are recorded inside ``no_sync``."""


@contextlib.contextmanager
def quiet_profile() -> Iterator[torch.autograd.profiler.profile]:
    """The autograd profiler with its C++ start/stop lines (one per rank each time) kept off the terminal."""
    with quiet_native_output(), torch.autograd.profiler.profile(use_kineto=False) as prof:
        yield prof


class ReducerSpy:
    """Stands in for ``ddp.reducer`` and logs ``prepare_for_forward`` / ``prepare_for_backward``
    (the call that sets the C++ flag ``expect_autograd_hooks_``); everything else goes through."""

    def __init__(self, real: Any):
        self._real = real
        self.calls: list[str] = []

    def prepare_for_forward(self, *args: Any) -> Any:
        self.calls.append("prepare_for_forward")
        return self._real.prepare_for_forward(*args)

    def prepare_for_backward(self, *args: Any) -> Any:
        self.calls.append("prepare_for_backward")
        return self._real.prepare_for_backward(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


SCENARIOS: dict[str, tuple[bool, bool, bool]] = {
    # name: (forward inside no_sync, backward inside no_sync, zero the grads first)
    "plain step": (False, False, True),
    "forward + backward inside no_sync": (True, True, True),
    "forward outside, backward inside": (False, True, True),
    "forward inside, backward outside": (True, False, True),
    "plain step after it (grads kept)": (False, False, False),
}
"""The micro-steps ``probe`` runs, in this order. The last one does not zero the gradients, so it
synchronises what the unsynchronised step before it accumulated as well."""


@dataclass(frozen=True)
class Observed:
    """One scenario of ``probe`` on one rank: DDP's flags, the hooks that fired, the all-reduces."""

    scenario: str
    flag_at_forward: bool  # require_backward_grad_sync when forward ran
    prepare_for_backward: bool  # forward armed the reducer
    forward_param_sync: bool  # require_forward_param_sync after forward
    flag_at_backward: bool  # require_backward_grad_sync when backward ran
    grad_hooks: int  # the lab's post_accumulate_grad hooks that fired
    reducer_hooks: int  # gradients the reducer's own hook copied into its buckets
    comm_hook_calls: int  # all-reduces
    grads_equal: bool  # every rank's .grad the same


def probe(bucket_cap_mb: float | None = 25, setup: Setup = DEFAULT) -> list[Observed]:
    """Run each of ``SCENARIOS`` once on this rank (a collective: call it on every rank) and return
    an ``Observed`` per scenario (the reducer's own hook counted by the profiler, ``REDUCER_EVENTS``;
    the all-reduces by a comm hook)."""
    info = dist_info()
    ddp = wrap(model(setup), bucket_cap_mb)
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
        x = torch.randn(setup.micro_batch, setup.dim, generator=g).to(info.device)
        spy.calls.clear()
        with ddp.no_sync() if fwd_in else nullcontext():
            flag_fwd = ddp.require_backward_grad_sync
            loss = ddp(x).pow(2).mean()
            armed = "prepare_for_backward" in spy.calls
            param_sync = ddp.require_forward_param_sync
        fired[0], before = 0, len(counter.events)
        with ddp.no_sync() if bwd_in else nullcontext(), quiet_profile() as prof:
            flag_bwd = ddp.require_backward_grad_sync
            loss.backward()
        reducer_hooks = sum(e.name in REDUCER_EVENTS for e in prof.function_events)
        grads = flat(ddp.module, grads=True, device=None)
        everyone = [torch.empty_like(grads) for _ in range(info.world_size)]
        dist.all_gather(everyone, grads)
        same = all(torch.equal(everyone[0], t) for t in everyone[1:])
        calls = len(counter.events) - before
        rows.append(Observed(name, flag_fwd, armed, param_sync, flag_bwd, fired[0], reducer_hooks, calls, same))
    for h in handles:
        h.remove()
    ddp.reducer = spy._real
    del ddp, spy, counter
    return rows
