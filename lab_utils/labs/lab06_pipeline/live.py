"""Bytes autograd holds for backward, measured live: as a forward saves tensors and as autograd frees them.

    tally = LiveBytes()
    with LiveMeter(tally, exclude=list(stage.parameters())):   # around one forward
        y = stage(x)
    tally.now, tally.peak          # bytes held for backward now, and the most at once
    y.sum().backward()             # autograd frees what it saved: tally.now falls back

``timeline.Recorder`` meters every forward of its stage, so a schedule that holds more
micro-batches than its order suggests shows in ``peak``.
"""

from __future__ import annotations

import torch

from lab_utils.memory import SavedTensorMeter, storage_key

__all__ = ["LiveBytes", "LiveMeter", "unpack"]


class _Held:
    """A saved tensor as autograd stores it while a ``LiveMeter`` is on: its storage counts as
    live until autograd drops it (after the backward that used it, or with the graph)."""

    __slots__ = ("tensor", "key", "tally")

    def __init__(self, tensor: torch.Tensor, key: tuple[int, str], tally: LiveBytes):
        self.tensor, self.key, self.tally = tensor, key, tally
        tally.hold(key, tensor.untyped_storage().nbytes())

    def __del__(self) -> None:
        self.tally.release(self.key)


class LiveBytes:
    """Bytes that autograd holds for backward right now, each storage once (``now``), and the most
    at any moment (``peak``): measured as tensors are saved and as autograd frees them, so a
    schedule that holds more than its order implies shows up here."""

    def __init__(self) -> None:
        self._refs: dict[tuple[int, str], list[int]] = {}  # storage: [holders, bytes]
        self.now = self.peak = 0

    def hold(self, key: tuple[int, str], nbytes: int) -> None:
        ref = self._refs.setdefault(key, [0, nbytes])
        if ref[0] == 0:
            self.now += nbytes
            self.peak = max(self.peak, self.now)
        ref[0] += 1

    def release(self, key: tuple[int, str]) -> None:
        ref = self._refs.get(key)
        if ref is None:
            return
        ref[0] -= 1
        if ref[0] == 0:
            self.now -= ref[1]
            del self._refs[key]


class LiveMeter(SavedTensorMeter):
    """``SavedTensorMeter`` for one forward whose saved tensors also count in a ``LiveBytes``
    until autograd frees them."""

    def __init__(self, tally: LiveBytes, exclude):
        super().__init__(None, exclude=exclude)
        self.tally = tally

    def _pack(self, t: torch.Tensor):
        self.add(t)
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or storage_key(t) in self._excluded:
            return t
        return _Held(t, storage_key(t), self.tally)

    def __enter__(self) -> LiveMeter:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


def unpack(packed):
    return packed.tensor if isinstance(packed, _Held) else packed
