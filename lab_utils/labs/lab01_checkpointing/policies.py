"""Selective checkpointing policies, and the instrument that lets the memory meter see their cache.

    contexts = functools.partial(create_selective_checkpoint_contexts, policies.counted(my_policy))
    y = checkpoint(block, x, use_reentrant=False, context_fn=contexts)

A policy is ``policy(ctx, op, *args, **kwargs) -> CheckpointPolicy``; ``counted`` is needed because
the policy's cache lives where no saved-tensor hook (so no ``SavedTensorMeter``) sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy

from lab_utils.memory import nbytes, note_saved
from lab_utils.memory.recompute import count_flops

__all__ = [
    "CensusRow",
    "MATMUL_OPS",
    "WEIGHT_MATMUL_OPS",
    "counted",
    "selective_policy",
    "module_policy",
    "op_census",
    "op_key",
]

MATMUL_OPS = frozenset(
    {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten.baddbmm.default,
        torch.ops.aten.linear.default,
        torch.ops.aten.matmul.default,
    }
)
# the products with a weight (nn.Linear runs as addmm, or mm without bias): many FLOPs per byte
WEIGHT_MATMUL_OPS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.linear.default})
SAVE = frozenset({CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE})

Policy = Callable[..., CheckpointPolicy]


def _note_outputs(out: object) -> None:
    for t in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(t, torch.Tensor):
            note_saved(t, "selective cache")


def counted(policy: Policy) -> Policy:
    """``policy`` unchanged, except that what it saves is reported to an active SavedTensorMeter
    (through ``ctx.op_output``, which the policy context carries in forward since torch 2.13)."""
    if not callable(policy):
        raise TypeError(f"counted(policy): policy must be a function (ctx, op, *args, **kwargs), got {policy!r}")

    def measured(ctx, op, *args, **kwargs):
        decision = policy(ctx, op, *args, **kwargs)
        if decision in SAVE and not ctx.is_recompute:
            _note_outputs(getattr(ctx, "op_output", None))
        return decision

    return measured


def selective_policy(save_ops: Iterable = MATMUL_OPS) -> Policy:
    """MUST_SAVE the outputs of ``save_ops`` (default: matrix products, costly to recompute),
    PREFER_RECOMPUTE everything else (pointwise ops: cheap)."""
    save = frozenset(save_ops)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class module_policy:
    """A policy deciding by the module that runs the op: MUST_SAVE inside modules named in
    ``save`` (``named_modules`` names of ``model``), PREFER_RECOMPUTE elsewhere. Use as a context
    manager (it hooks the modules) or call ``close()``."""

    def __init__(self, model: nn.Module, save: Iterable[str]):
        self.save = set(save)
        names = {n for n, _ in model.named_modules()}
        if self.save - names:
            raise ValueError(
                f"module_policy: {sorted(self.save - names)} are not modules of the model; "
                f"choose from {sorted(n for n in names if n)}"
            )
        self._stack: list[str] = []
        self._handles = []
        for name, mod in model.named_modules():
            if name:
                self._handles.append(mod.register_forward_pre_hook(lambda m, a, n=name: self._stack.append(n)))
                self._handles.append(mod.register_forward_hook(lambda m, a, o, n=name: self._pop(n), always_call=True))

    def _pop(self, name: str) -> None:  # a forward hook must return None (else it replaces the output)
        if self._stack and self._stack[-1] == name:
            self._stack.pop()

    def __call__(self, ctx, op, *args, **kwargs) -> CheckpointPolicy:
        if any(n in self.save for n in self._stack):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> module_policy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def op_key(op: object, args: tuple) -> tuple:
    """The op and its tensor arguments' shapes: what tells apart, inside one block, the calls a
    policy sees (``qkv``'s addmm from ``fc``'s); the same in ``op_census``'s plain forward and in the
    checkpointed forward, the only pass where torch 2.13 calls a policy."""
    return (str(op), *(tuple(a.shape) for a in args if isinstance(a, torch.Tensor)))


@dataclass(frozen=True)
class CensusRow:
    """One op call of ``op_census`` that allocates its output: its place in the call order, op name,
    ``op_key``, output shape and bytes, FLOPs, FLOPs per output byte, and whether autograd saves it."""

    index: int
    op: str
    key: tuple
    out_shape: tuple[int, ...]
    out_bytes: int
    flops: int
    flops_per_byte: float
    saved_for_backward: bool = False


class _OpWatch(TorchDispatchMode):
    """Records, per op call that allocates its output, the row ``op_census`` returns (not yet
    knowing whether autograd saves it)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[CensusRow] = []
        self.storages: list[set[int]] = []
        self.outputs: list[torch.Tensor] = []  # held, so that no later tensor reuses their memory

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        new = [t for t in outs if t.untyped_storage().data_ptr() not in ins]
        n = nbytes(new)
        if n:
            f = count_flops(lambda: func(*args, **kwargs))  # the op once more, to count its FLOPs alone
            self.rows.append(
                CensusRow(
                    index=len(self.rows),
                    op=str(func),
                    key=op_key(func, args),
                    out_shape=tuple(new[0].shape),
                    out_bytes=n,
                    flops=f,
                    flops_per_byte=f / n,
                )
            )
            self.storages.append({t.untyped_storage().data_ptr() for t in new})
            self.outputs += new
        return out


def op_census(region: nn.Module, x: torch.Tensor) -> list[CensusRow]:
    """Every op call of one plain ``region(x)`` that allocates its output, most bytes first, as
    ``CensusRow``s: index, op, key (``op_key``), out_shape, out_bytes, flops, flops_per_byte and
    saved_for_backward (whether autograd saves that output: caching any other holds it for nothing)."""
    if not isinstance(region, nn.Module) or not isinstance(x, torch.Tensor):
        raise TypeError(f"op_census(region, x): a module and a tensor, got {type(region).__name__}, {type(x).__name__}")
    saved: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.add(t.untyped_storage().data_ptr())
        return t

    h = x.detach().requires_grad_(x.is_floating_point())  # as in the middle of a chain
    watch = _OpWatch()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), watch:
        out = region(h)
    rows = [replace(r, saved_for_backward=bool(ptrs & saved)) for r, ptrs in zip(watch.rows, watch.storages)]
    del out
    watch.outputs.clear()
    return sorted(rows, key=lambda r: -r.out_bytes)
