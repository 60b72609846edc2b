"""The plan's models: a device's memory and an update's time under each strategy the course taught.

Restated from the labs so the planner imports no lab's package (the tests check they agree): memory is
``stepmem.predict`` sharded by the ZeRO formulas (lab 7), a pipeline stage holding 1F1B's
in-flight micro-batches (lab 6); time is FLOPs / the assumed rate plus communication under the
overlap model (lab 3), FSDP at 1.5 x DDP's bytes (lab 7), local SGD every H updates (lab 5) and
the bubble (p - 1)/(m + p - 1) (lab 6).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lab_utils.memory import stepmem
from lab_utils.netmodel import (
    Bucket,
    MicroStep,
    backward_with_comm,
    collective_seconds,
    evenly_ready,
    naive_update_seconds,
    no_sync_update_seconds,
    serial_seconds,
)
from lab_utils.plan.inputs import Hardware

__all__ = [
    "Strategy",
    "Memory",
    "Plan",
    "PARALLEL",
    "CHECKPOINTING",
    "zero_shard",
    "LAYOUTS",
    "zero_state",
    "fill_drain_bubble",
    "in_flight",
    "update_flops",
    "fsdp_gathered",
    "memory",
    "seconds",
    "evaluate",
]

PARALLEL = ("ddp", "ddp-every-step", "zero1", "zero2", "fsdp", "local-sgd", "pipeline")
CHECKPOINTING = ("none", "every layer", "selective", "offload")
BUCKET_BYTES = 25 * 2**20  # DDP's default bucket cap
# Selective recompute re-runs the pointwise ops only: few FLOPs, but memory-bound. Korthikanti et
# al. (2022) report a few per cent of overhead for theirs; an assumption here, not a measurement.
SELECTIVE_OVERHEAD = 0.04


@dataclass(frozen=True)
class Strategy:
    """One way to train: how the devices split the work (``parallel``), how activations are kept
    (``checkpointing``), micro-batches per update (``accumulation``; a pipeline's m), local SGD's
    ``h`` (updates between averages) and a pipeline's ``stages``."""

    parallel: str = "ddp"
    checkpointing: str = "none"
    accumulation: int = 1
    h: int = 1
    stages: int = 1

    def __post_init__(self) -> None:
        if self.parallel not in PARALLEL:
            raise ValueError(f"Strategy(parallel={self.parallel!r}): choose one of {PARALLEL}")
        if self.checkpointing not in CHECKPOINTING:
            raise ValueError(f"Strategy(checkpointing={self.checkpointing!r}): choose one of {CHECKPOINTING}")
        if min(self.accumulation, self.h, self.stages) < 1:
            raise ValueError(f"{self}: accumulation, h and stages must be >= 1")

    @property
    def name(self) -> str:
        par = {"local-sgd": f"local SGD H={self.h}", "pipeline": f"pipeline {self.stages} stages"}.get(
            self.parallel, self.parallel
        )
        k = f", K={self.accumulation}" if self.accumulation > 1 else ""
        return f"{par}{k}, ckpt {self.checkpointing}"


@dataclass(frozen=True)
class Memory(stepmem.Anatomy):
    """Predicted bytes on one device, part by part (``peak``: their sum); ``gathered``: what FSDP
    holds unsharded (``fsdp_gathered``)."""

    gathered: int = 0


@dataclass(frozen=True)
class Plan:
    """A strategy's predictions: memory per device, seconds per update (compute and exposed
    communication), and whether it fits the device."""

    strategy: Strategy
    memory: Memory
    seconds: float
    compute_s: float
    comm_s: float
    fits: bool


def zero_shard(weights: int, gradients: int, optimizer: int, *, world_size: int, stage: int) -> tuple[int, int, int]:
    """Per-rank (weights, gradients, optimizer) bytes under ZeRO stage 0-3 (Rajbhandari et al.
    2020): 1 shards the optimizer state, 2 the gradients too, 3 (FSDP) the weights too. What each
    part holds is the layout's (``LAYOUTS``, ``zero_state``)."""
    d = world_size
    return (
        weights // d if stage >= 3 else weights,
        gradients // d if stage >= 2 else gradients,
        optimizer // d if stage >= 1 else optimizer,
    )


# Bytes per parameter of (weights, gradients, optimizer state) for Adam(W) in mixed precision, by
# where the fp32 copy lives. ZeRO shards each part, so the split decides what sharding saves.
LAYOUTS: dict[str, tuple[int, int, int]] = {
    # torch.autocast over fp32 parameters (the HF Trainer's bf16=True; plain fp32 alike): fp32
    # weights and gradients outside the optimizer, its two fp32 moments in it. Every plan here.
    "autocast": (4, 4, 8),
    # ZeRO section 3.1 (Micikevicius et al. 2018's layout): 16-bit weights and gradients; the fp32
    # master copy and the two moments are the optimizer's state, K = 12 bytes per parameter.
    "zero": (2, 2, 12),
}


def zero_state(params: int, *, world_size: int, stage: int, layout: str = "autocast") -> tuple[int, int, int]:
    """Per-rank (weights, gradients, optimizer) bytes of ``params`` parameters trained with Adam in
    ``layout`` (``LAYOUTS``) under ZeRO stage 0-3. ZeRO's Figure 1 (7.5 B parameters, 64 ranks)
    is ``layout="zero"``: 120, 31.4, 16.6, 1.9 GB; ZeRO-1 in the autocast layout keeps 60.9 GB."""
    if layout not in LAYOUTS:
        raise ValueError(f"zero_state(layout={layout!r}): choose one of {list(LAYOUTS)}")
    w, g, o = (params * b for b in LAYOUTS[layout])
    return zero_shard(w, g, o, world_size=world_size, stage=stage)


def fill_drain_bubble(p: int, m: int) -> float:
    """A fill-drain pipeline's idle fraction with equal stages: (p - 1) / (m + p - 1)."""
    return (p - 1) / (m + p - 1)


def in_flight(p: int, m: int, stage: int) -> int:
    """Micro-batches whose activations stage ``stage`` (0-based) holds at once under 1F1B."""
    return min(m, p - stage)


def update_flops(s: stepmem.Shape, recompute: bool) -> float:
    """FLOPs of one update over ``s.batch`` sequences: 2 per parameter and token forward (matmuls:
    the layers and the head), 4 * seq * hidden per layer and token for attention's two matmuls;
    backward twice the forward; checkpointing runs the layers' forward once more, less (Llama)
    each layer's last matmul: nothing in the layer saves down_proj's output, so non-reentrant
    checkpointing stops its replay before it (lab 1's early stop; tests/core/test_plan.py counts
    it). GPT-2 and BERT are charged the whole forward (their dropout may need the last output)."""
    tokens = s.batch * s.seq
    layers = (2 * stepmem.layer_parameters(s) + 4 * s.seq * s.hidden) * s.layers * tokens
    head = 2 * s.vocab * s.hidden * tokens
    replay = layers - (2 * s.hidden * s.ffn_size * s.layers * tokens if s.arch == "llama" else 0)
    return 3 * (layers + head) + (replay if recompute else 0)


def _shape(s: stepmem.Shape, batch: int, st: Strategy) -> stepmem.Shape:
    return dataclasses.replace(
        s, batch=batch, accumulation=st.accumulation, checkpointing=st.checkpointing in ("every layer", "offload")
    )


def _selective_layer_bytes(s: stepmem.Shape, b: int) -> int:
    """A layer under a policy that saves the matmuls' (and attention's) outputs and recomputes the
    pointwise ops: its input, q/k/v, attention's output, o's, gate's and up's. Not down's: only
    the residual add after it reads it, and the replay stops before it, so a cache of it is read
    by no one (lab 1). A model from lab 1's policy; not measured on these models."""
    u, e, c = b * s.seq * s.hidden, s.dtype_bytes, s.compute_bytes
    r = s.n_kv_heads / s.heads
    return int(u * e + ((1 + 2 * r) + 1 + 1 + 2 * s.ffn_size / s.hidden) * u * c)


def _layer_copies(s: stepmem.Shape) -> int:
    """Bytes of autocast's bf16 copies of one layer's matmul weights (0 without autocast)."""
    return s.compute_bytes * (stepmem.layer_parameters(s) - 2 * s.hidden) if s.precision == "bf16" else 0


def _device_step(s: stepmem.Shape, batch: int, st: Strategy, stepped: int | None = None) -> stepmem.Anatomy:
    """The step on one device before sharding (stepmem), with selective and offload applied; its
    temporaries against its own activations, the optimizer stepping ``stepped`` parameters here
    (default all of them)."""
    shape = _shape(s, batch, st)
    a = stepmem.predict(shape)
    b = shape.micro_batch
    if st.checkpointing == "selective":
        shape = dataclasses.replace(shape, checkpointing=True)
        ckpt = stepmem.predict(shape)
        extra = s.layers * (_selective_layer_bytes(s, b) - b * s.seq * s.hidden * s.dtype_bytes)
        a = dataclasses.replace(ckpt, activations=ckpt.activations + extra)
    elif st.checkpointing == "offload":  # layer inputs go to the host; one is back at a time
        inputs = s.layers * b * s.seq * s.hidden * s.dtype_bytes
        a = dataclasses.replace(a, activations=a.activations - inputs + inputs // s.layers)
    return dataclasses.replace(a, temporaries=stepmem.temporaries(shape, a.activations, stepped=stepped))


def memory(s: stepmem.Shape, hw: Hardware, st: Strategy) -> Memory:
    """Predicted bytes per device for ``st`` (``s.batch`` is the global batch). Under ZeRO-1/2 and
    FSDP each rank's optimizer steps its 1/d of the parameters, so its foreach buffer is 1/d too."""
    if st.parallel == "pipeline":
        return _pipeline_memory(s, hw, st)
    d = hw.devices
    stage = {"zero1": 1, "zero2": 2, "fsdp": 3}.get(st.parallel, 0)
    a = _device_step(s, s.batch // d, st, stepped=stepmem.parameters(s) // d if stage else None)
    w, g, o = zero_shard(a.weights, a.gradients, a.optimizer, world_size=d, stage=stage)
    gathered = fsdp_gathered(s) if stage == 3 and d > 1 else 0
    return Memory(w, g, o, a.activations, a.temporaries, gathered)


def fsdp_gathered(s: stepmem.Shape) -> int:
    """Unsharded bytes an FSDP2 rank holds during the layers' backward, with one unit per decoder
    layer and the root holding the rest (embedding, final norm, head): the root's parameters,
    which FSDP2 does not reshard after forward when ``reshard_after_forward`` is None (its default;
    torchtitan passes True, and then the root's backward gathers them again before the layers'
    and frees them in its post-backward, in the final callback); the head's gradient, which the
    root reduce-scatters only once backward ends (its inputs need no gradient, so its
    post-backward runs in the final callback); this layer's and the prefetched next layer's
    parameters and this layer's gradient before its reduce-scatter. In the master dtype: this
    FSDP shards the autocast layout, no ``MixedPrecisionPolicy``. Read from torch's
    ``_fully_shard`` source, not measured here."""
    layer = stepmem.layer_parameters(s)
    root = stepmem.parameters(s) - s.layers * layer
    head_grad = s.vocab * s.hidden if s.arch != "bert" else 0
    return (root + head_grad + 3 * layer) * s.dtype_bytes


def _pipeline_memory(s: stepmem.Shape, hw: Hardware, st: Strategy) -> Memory:
    """The worse of the first stage (embedding, 1F1B's p micro-batches in flight) and the last
    (final norm, head and the loss), each with layers / p layers; each stage's temporaries are its
    own: its optimizer steps its parameters, and only the last computes the loss."""
    p, d = st.stages, hw.devices // st.stages
    one = _device_step(s, s.batch // d, st)
    per_param = (one.weights + one.gradients + one.optimizer) / stepmem.parameters(s)
    shape = _shape(s, s.batch // d, st)
    if st.checkpointing == "selective":
        shape = dataclasses.replace(shape, checkpointing=True)
    b, n = shape.micro_batch, s.layers // p
    layer_input = b * s.seq * s.hidden * s.dtype_bytes
    if st.checkpointing == "selective":
        per_layer_act = _selective_layer_bytes(s, b)
    elif st.checkpointing == "none":  # with the layer's bf16 weight copies, kept per micro-batch
        per_layer_act = stepmem.layer_activation_bytes(shape, b) + _layer_copies(s)
    else:
        per_layer_act = layer_input
    kept = per_layer_act if st.checkpointing == "none" else layer_input
    outside = stepmem.activation_bytes(shape) - s.layers * kept  # the head's side, with its copy
    layer, emb = stepmem.layer_parameters(s) * n, s.vocab * s.hidden
    stages = (  # (parameters, activations, computes the loss)
        (layer + emb, in_flight(p, st.accumulation, 0) * per_layer_act * n, False),
        (layer + emb + s.hidden, per_layer_act * n + outside, True),
    )
    best = None
    for params, act, loss in stages:
        state = int(params * per_param)
        temp = stepmem.temporaries(shape, act, stepped=params, loss=loss)
        if best is None or state + act + temp > sum(best):
            best = (state, act, temp)
    state, act, temp = best
    w = int(state * one.weights / (one.weights + one.gradients + one.optimizer))
    g = int(state * one.gradients / (one.weights + one.gradients + one.optimizer))
    return Memory(w, g, state - w - g, int(act), temp)


def _micro(k: int, compute_s: float, comm_op: str, comm_bytes: float) -> MicroStep:
    fwd, bwd = compute_s / k / 3, 2 * compute_s / k / 3
    n = max(1, round(comm_bytes / BUCKET_BYTES))
    return MicroStep(fwd, bwd, evenly_ready([comm_bytes / n] * n, bwd, comm_op))


def seconds(s: stepmem.Shape, hw: Hardware, st: Strategy) -> tuple[float, float]:
    """Predicted (seconds per update, compute seconds of it) for ``st``."""
    recompute = st.checkpointing in ("every layer", "offload")
    d = hw.devices // st.stages
    compute = update_flops(s, recompute) / hw.devices / (hw.tflops * 1e12)
    if st.checkpointing == "selective":  # pointwise ops re-run: an assumption (SELECTIVE_OVERHEAD)
        compute *= 1 + SELECTIVE_OVERHEAD
    if st.checkpointing == "offload":  # two copies per offloaded byte, on the compute stream (lab 1)
        b = s.batch // d // st.accumulation  # a pipeline stage offloads its own layers' inputs
        compute += 2 * st.accumulation * s.layers // st.stages * b * s.seq * s.hidden * s.dtype_bytes / hw.host_Bps
    grads = stepmem.parameters(s) * s.dtype_bytes
    link, k = hw.link, st.accumulation
    if st.parallel == "pipeline":
        p, m = st.stages, k
        # the residual stream between stages is in the master dtype (fp32 under autocast: lab 8's table)
        send = collective_seconds("send", s.batch // d // m * s.seq * s.hidden * s.dtype_bytes, 2, link)
        # fill-drain: m + p - 1 slots, each one micro-batch of one stage (compute is already one
        # device's, i.e. one stage's, share of the update: compute / m per slot), plus its two sends
        span = (compute / m + 2 * send) * (m + p - 1)
        return span + serial_seconds([("all_reduce", grads / p)], link, d), compute
    if st.parallel == "local-sgd":
        return compute + serial_seconds([("all_reduce", grads)], link, d) / st.h, compute
    if st.parallel in ("ddp", "ddp-every-step"):
        micro = _micro(k, compute, "all_reduce", grads)
        fn = no_sync_update_seconds if st.parallel == "ddp" else naive_update_seconds
        return fn(micro, k, link, d), compute
    if st.parallel in ("zero1", "zero2"):  # reduce-scatter, then all-gather after the step
        micro = _micro(k, compute, "reduce_scatter", grads / d)
        fn = (
            no_sync_update_seconds if st.parallel == "zero1" else naive_update_seconds
        )  # zero2's sharded grads: every micro-step
        return fn(micro, k, link, d) + serial_seconds([("all_gather", grads)], link, d), compute
    # fsdp: per micro-step two all-gathers (forward, backward) and a reduce-scatter, overlapped
    per = compute / k
    layers = max(1, s.layers)
    buckets = [Bucket(per * (i + 1) / (2 * layers), grads / layers, "all_gather") for i in range(2 * layers)]
    buckets += [Bucket(per * (i + 1) / layers, grads / layers / d, "reduce_scatter") for i in range(layers)]
    return k * backward_with_comm(buckets, per, link, d).end_s, compute


def evaluate(s: stepmem.Shape, hw: Hardware, st: Strategy) -> Plan:
    """The strategy's predicted memory per device and time per update on ``hw``."""
    mem = memory(s, hw, st)
    total, compute = seconds(s, hw, st)
    return Plan(st, mem, total, compute, total - compute, mem.peak <= hw.memory)
