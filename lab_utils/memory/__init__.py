"""What autograd keeps for backward, measured: bytes of saved tensors, per module, and CUDA peaks.

    with SavedTensorMeter(model) as meter:          # one forward inside the meter
        loss = model(x).sum()
    print(meter.total_bytes, meter.by_module)       # unique storages, parameters excluded
    report = measure_step(model, lambda: model(x).sum())   # forward + backward, CUDA peak if any
    cpu_peak(lambda: model(x).sum().backward())             # allocator peak on CPU (profiler)

A storage is counted once, whole (a saved view keeps all of it alive); parameters are excluded.
A storage is known by its identity while it lives, not by its address: when FSDP2 frees a block's
gathered weights after its forward, the allocator hands their addresses to later activations,
and those are new storages to count.
Non-reentrant ``checkpoint`` stashes its inputs outside its own hook, so they count, and what it
drops does not. A selective policy's cached outputs are invisible to hooks: wrap the policy in
``lab_utils.labs.lab01_checkpointing.policies.counted`` (``note_saved``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.profiler import ProfilerActivity, profile

from lab_utils.env import quiet_native_output

__all__ = [
    "tensor_bytes",
    "nbytes",
    "SavedRecord",
    "SavedTensorMeter",
    "CudaPeak",
    "cpu_peak",
    "cpu_levels",
    "MemoryReport",
    "measure_step",
    "note_saved",
    "storage_key",
    "fmt_bytes",
]

_ACTIVE: list[SavedTensorMeter] = []  # meters currently entered, innermost last


def storage_key(t: torch.Tensor) -> tuple[int, str]:
    """Where a tensor's memory is now: (storage data pointer, device). A label to match records to
    your own live tensors; not an identity over time (a freed address is handed out again)."""
    return (t.untyped_storage().data_ptr(), str(t.device))


def fmt_bytes(n: float | None) -> str:
    """'12.0 KiB' style; 'n/a' for None."""
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@dataclass(frozen=True)
class SavedRecord:
    """One tensor saved for backward. ``nbytes`` is 0 when its storage was already counted."""

    module: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    source: str = "autograd"  # "autograd" (a saved-tensor hook) or what called note_saved
    storage: tuple[int, str] = (0, "")  # storage_key(tensor): match records to your own tensors


class SavedTensorMeter:
    """Context manager counting the bytes autograd saves for backward during a forward.

    ``model``: its parameters are excluded and its submodules name the breakdown (innermost
    module running when a tensor is saved; "" outside any module). ``exclude``: tensors (e.g. the
    batch) whose storage should not count either.
    """

    def __init__(self, model: nn.Module | None = None, *, exclude: Iterable[torch.Tensor] = ()):
        self.model = model
        self._excluded: set[tuple[int, str]] = {storage_key(t) for t in exclude}
        if model is not None:
            self._excluded |= {storage_key(p) for p in model.parameters()}
        self._seen: dict[int, StorageWeakRef] = {}  # counted storages, by identity while alive
        self._stack: list[str] = []
        self._handles: list = []
        self._hooks = None
        self.records: list[SavedRecord] = []
        self.total_bytes = 0
        self.by_module: dict[str, int] = defaultdict(int)

    # -- module attribution -------------------------------------------------------------
    def _register(self) -> None:
        if self.model is None:
            return
        for name, mod in self.model.named_modules():
            if name:
                self._handles.append(mod.register_forward_pre_hook(lambda m, a, n=name: self._stack.append(n)))
                self._handles.append(mod.register_forward_hook(lambda m, a, o, n=name: self._pop(n), always_call=True))

    def _pop(self, name: str) -> None:
        if self._stack and self._stack[-1] == name:
            self._stack.pop()

    # -- counting -----------------------------------------------------------------------
    def add(self, t: torch.Tensor, source: str = "autograd") -> None:
        """Count ``t`` as kept for backward (once per storage; parameters and excluded skipped)."""
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return
        key = storage_key(t)
        if key in self._excluded:
            return
        storage = t.untyped_storage()
        nbytes = 0
        if self._first_sight(storage):
            nbytes = storage.nbytes()
        mod = self._stack[-1] if self._stack else ""
        self.records.append(SavedRecord(mod, tuple(t.shape), t.dtype, nbytes, source, key))
        self.total_bytes += nbytes
        self.by_module[mod] += nbytes

    def _first_sight(self, storage: torch.UntypedStorage) -> bool:
        """True the first time this storage (the object, while it lives) is seen. A storage that
        died and whose slot a new one took is a new storage; so is one at a reused address."""
        key = storage._cdata  # the storage object itself (its address in memory is no identity)
        seen = self._seen.get(key)
        if seen is not None and not seen.expired():
            return False
        self._seen[key] = StorageWeakRef(storage)
        return True

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        self.add(t)
        return t

    def __enter__(self) -> SavedTensorMeter:
        self._register()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)
        self._hooks.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.by_module = dict(self.by_module)

    def kept_storages(self) -> dict[tuple[int, str], int]:
        """Bytes counted at each ``storage_key`` (an address: two storages that held it one after the
        other add up there, as the meter counted both)."""
        out: dict[tuple[int, str], int] = defaultdict(int)
        for r in self.records:
            if r.nbytes:
                out[r.storage] += r.nbytes
        return dict(out)


def note_saved(t: torch.Tensor, source: str) -> None:
    """Report a tensor kept for backward that no saved-tensor hook sees (e.g. a selective
    checkpoint cache) to the innermost active meter; a no-op outside any meter."""
    if _ACTIVE:
        _ACTIVE[-1].add(t, source)


class CudaPeak:
    """Context manager: ``bytes`` = peak CUDA memory allocated inside it, above the level at entry
    (``torch.cuda.max_memory_allocated`` after a reset). ``bytes`` is None without CUDA."""

    def __init__(self, device: torch.device | str | None = None):
        self.device = device
        self.bytes: int | None = None

    def __enter__(self) -> CudaPeak:
        if torch.cuda.is_available():
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize(self.device)
            self.bytes = torch.cuda.max_memory_allocated(self.device) - self._base


def cpu_levels(fn: Callable[[], object]) -> tuple[int, int]:
    """Run ``fn()`` under the profiler and return the (peak, final) level of CPU bytes allocated
    by torch above the starting level (a running sum of the profiler's allocation/free events).
    Slower than the meter (the first call pays ~1-2 s of profiler start-up), so use it once per
    strategy. The profiler's own log lines are silenced, and so is anything ``fn`` writes straight
    to file descriptors 1 and 2 (Python prints inside a notebook still show)."""
    with quiet_native_output():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    events = sorted(
        (
            e
            for e in prof.profiler.kineto_results.events()
            if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
        ),
        key=lambda e: e.start_ns(),
    )
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak, live


def cpu_peak(fn: Callable[[], object]) -> int:
    """The peak of ``cpu_levels(fn)``: torch's CPU bytes allocated above the starting level."""
    return cpu_levels(fn)[0]


@dataclass
class MemoryReport:
    """What one training step kept: saved bytes (any device), per module, CUDA peak (or None)."""

    saved_bytes: int
    by_module: dict[str, int]
    records: list[SavedRecord] = field(repr=False)
    peak_cuda_bytes: int | None = None
    peak_cpu_bytes: int | None = None


def measure_step(
    model: nn.Module,
    loss_fn: Callable[[], torch.Tensor],
    *,
    exclude: Iterable[torch.Tensor] = (),
    profile_cpu: bool = False,
    loss_of: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> MemoryReport:
    """One step: ``loss = loss_fn()`` under a SavedTensorMeter, then ``loss.backward()``, all
    under a CudaPeak (and, with ``profile_cpu``, a ``cpu_peak``). With ``loss_of``, ``loss_fn()``
    is the forward alone and ``loss = loss_of(its output)`` runs outside the meter: what the loss
    saves is not counted. Gradients accumulate into the model as in any step (zero them yourself,
    to None, so both runs allocate them alike)."""
    out: dict = {}

    def step() -> None:
        with CudaPeak() as peak:
            with SavedTensorMeter(model, exclude=exclude) as meter:
                y = loss_fn()
            loss = y if loss_of is None else loss_of(y)
            if not isinstance(loss, torch.Tensor):
                what = "loss_fn()" if loss_of is None else "loss_of(loss_fn())"
                raise TypeError(f"measure_step: {what} returned {type(loss).__name__}; return the loss tensor")
            loss.backward()
            del loss, y
        out.update(meter=meter, peak=peak.bytes)

    cpu = cpu_peak(step) if profile_cpu else None
    if not profile_cpu:
        step()
    m = out["meter"]
    return MemoryReport(m.total_bytes, m.by_module, m.records, out["peak"], cpu)


def tensor_bytes(tensors) -> int:
    """Bytes of the given tensors (None skipped), each storage counted once."""
    kept = {storage_key(t): t.untyped_storage().nbytes() for t in tensors if isinstance(t, torch.Tensor)}
    return sum(kept.values())


def nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the tensors' elements, each tensor in full (``tensor_bytes`` counts each storage
    once, whole): what a module's parameters weigh, ``nbytes(model.parameters())``."""
    return sum(t.numel() * t.element_size() for t in tensors)
