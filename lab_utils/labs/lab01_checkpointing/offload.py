"""Offload, measured: what a saved-tensor offload hook (``save_on_cpu``) moves off the device.

    with PackCounter(save_on_cpu(), params=model.parameters()) as moved:
        loss = model(x).pow(2).mean()
    moved.activation_bytes, moved.param_bytes   # unique storages copied, split

The trap: the hook copies weights an op saves too (it does not know they are parameters). On a
CPU the copy happens but frees nothing, and costs a memcpy, not a PCIe transfer.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["PackCounter"]


class PackCounter:
    """``hooks`` (e.g. ``save_on_cpu()``) with its pack hook counted, each storage once:
    ``activation_bytes`` and ``param_bytes`` (``params``' storages); ``exclude`` not counted."""

    def __init__(
        self,
        hooks: torch.autograd.graph.saved_tensors_hooks,
        *,
        params: Iterable[torch.Tensor] = (),
        exclude: Iterable[torch.Tensor] = (),
    ):
        if not hasattr(hooks, "pack_hook"):
            raise TypeError(f"PackCounter(hooks): give a saved_tensors_hooks such as save_on_cpu(), got {hooks!r}")
        self.hooks = hooks
        self._params = {p.untyped_storage().data_ptr() for p in params}
        self._seen: set[int] = {t.untyped_storage().data_ptr() for t in exclude}
        self.activation_bytes = 0
        self.param_bytes = 0
        inner = hooks.pack_hook

        def pack(t: torch.Tensor):
            key = t.untyped_storage().data_ptr()
            if key not in self._seen:
                self._seen.add(key)
                n = t.untyped_storage().nbytes()
                if key in self._params:
                    self.param_bytes += n
                else:
                    self.activation_bytes += n
            return inner(t)

        hooks.pack_hook = pack

    def __enter__(self) -> PackCounter:
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.hooks.__exit__(*exc)
