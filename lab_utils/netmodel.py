"""The network/time model: what measured collectives cost on a link, alone and behind the backward.

    allreduce_seconds(100e6, world_size=8, link=LINKS["10GbE"])    # one 100 MB ring all-reduce
    comm_seconds(counter.events, LINKS["1GbE"], world_size=2)      # per-step seconds, one after another
    micro = MicroStep(forward_s=0.010, backward_s=0.020,
                      buckets=[Bucket(ready_s=0.008, nbytes=25e6), Bucket(ready_s=0.020, nbytes=20e6)])
    backward_with_comm(micro.buckets, micro.backward_s, LINKS["10GbE"], world_size=8).exposed_s
    naive_update_seconds(micro, 4, LINKS["10GbE"], world_size=8, optimizer_s=0.002)   # seconds per update
    no_sync_update_seconds(micro, 4, LINKS["10GbE"], world_size=8, optimizer_s=0.002)

A model, not a measurement (labs label it "modelled"). One collective costs the alpha-beta model
(Patarasuk & Yuan 2009; Thakur et al. 2005), with p ranks, n bytes, latency alpha, bandwidth beta:

    ring all-reduce  = 2 (p - 1) alpha + 2 (p - 1) / p * n / beta
    tree all-reduce  = 2 log2(p) (alpha + n / beta)   # reduce then broadcast, not pipelined
    broadcast (tree) = log2(p) (alpha + n / beta)

Behind the backward, a bucket's all-reduce starts once its gradients are ready, while the backward
goes on; transfers go one at a time in ready order:

    start_i = max(ready_i, end_{i-1})            end_i = start_i + collective_seconds(op_i, n_i, p, link)
    step    = max(backward_s, end_last)          # then the optimizer, which needs every gradient

Lab 3 compares it with a real shaped link (``tools/validate_link``, 2 ranks): in each of its stored
runs, and for each run predicted from another run's link and contention (``reallink.predicted``),
the model predicted too little on average, though not at every point: a likely underestimate of a
communication-heavy loop's cost, not a bound and not a validated estimate (the contention term
below brings it closer). Overlap is not free: the
backward and a transfer share the machine, and ``Contention`` (measured, not guessed) slows
overlapping compute by ``1 + compute`` and overlapping transfers by ``1 + comm``; the default
(none) is the model above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "ALGORITHMS",
    "Link",
    "LINKS",
    "allreduce_seconds",
    "collective_seconds",
    "comm_seconds",
    "Bucket",
    "Contention",
    "MicroStep",
    "Transfer",
    "OverlapStep",
    "backward_with_comm",
    "backward_then_comm",
    "naive_update_seconds",
    "no_sync_update_seconds",
    "serial_seconds",
    "evenly_ready",
]

ALGORITHMS = ("ring", "tree")


@dataclass(frozen=True)
class Link:
    """A network link between ranks: one-way latency (s) and bandwidth (bytes/s) per rank."""

    name: str
    latency_s: float
    bandwidth_Bps: float

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"Link {self.name!r}: latency_s={self.latency_s} must be >= 0 and finite")
        if not (self.bandwidth_Bps > 0 and math.isfinite(self.bandwidth_Bps)):
            raise ValueError(f"Link {self.name!r}: bandwidth_Bps={self.bandwidth_Bps} must be > 0")

    @classmethod
    def from_gbit(cls, name: str, gbit_per_s: float, latency_us: float) -> Link:
        """Build from the units links are sold in: Gbit/s and microseconds."""
        return cls(name, latency_us * 1e-6, gbit_per_s * 1e9 / 8)


# Order-of-magnitude presets, from a GPU server's fabric to a link between two sites.
LINKS: dict[str, Link] = {
    link.name: link
    for link in (
        Link.from_gbit("NVLink", 3600, 2),  # H100 NVLink 4: ~450 GB/s per GPU
        Link.from_gbit("InfiniBand", 400, 3),  # NDR 400 Gb/s
        Link.from_gbit("100GbE", 100, 10),
        Link.from_gbit("10GbE", 10, 30),
        Link.from_gbit("1GbE", 1, 100),
        Link.from_gbit("WAN", 0.1, 20_000),  # 100 Mb/s across sites, 20 ms
    )
}


def allreduce_seconds(nbytes: float, world_size: int, link: Link, algorithm: str = "ring") -> float:
    """Modelled time of one all-reduce of ``nbytes`` over ``world_size`` ranks on ``link``."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: must be >= 1")
    if nbytes < 0:
        raise ValueError(f"nbytes={nbytes}: must be >= 0")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r} is not one of {ALGORITHMS}")
    p = world_size
    if p == 1:
        return 0.0
    if algorithm == "ring":
        return 2 * (p - 1) * link.latency_s + 2 * (p - 1) / p * nbytes / link.bandwidth_Bps
    return 2 * collective_seconds("broadcast", nbytes, p, link)  # a tree reduce, then a tree broadcast


def collective_seconds(op: str, nbytes: float, world_size: int, link: Link) -> float:
    """Modelled time of one collective named as in ``torch.distributed`` (``op``)."""
    p = world_size
    if p <= 1:
        return 0.0
    if op == "all_reduce":
        return allreduce_seconds(nbytes, p, link)
    if op in ("broadcast", "reduce"):
        return math.ceil(math.log2(p)) * (link.latency_s + nbytes / link.bandwidth_Bps)
    if op in ("all_gather", "all_gather_into_tensor", "all_gather_single", "all_to_all", "all_to_all_single"):
        # Half a ring all-reduce; ``nbytes`` is the full (gathered) size, each rank receives (p-1)/p.
        return (p - 1) * link.latency_s + (p - 1) / p * nbytes / link.bandwidth_Bps
    if op in ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"):  # *_single: FSDP2's calls
        # ``nbytes`` is this rank's output chunk; a ring passes p-1 chunks.
        return (p - 1) * (link.latency_s + nbytes / link.bandwidth_Bps)
    if op in ("send", "recv"):
        return link.latency_s + nbytes / link.bandwidth_Bps
    raise ValueError(f"no cost model for op={op!r}")


def comm_seconds(events: Iterable, link: Link, world_size: int) -> list[float]:
    """Per-step modelled communication seconds for measured events (``CommEvent``s), assuming
    collectives run one after another."""
    per_step: dict[int, float] = {}
    for e in events:
        per_step[e.step] = per_step.get(e.step, 0.0) + collective_seconds(e.op, e.nbytes, world_size, link)
    n = max(per_step, default=-1) + 1
    return [per_step.get(s, 0.0) for s in range(n)]


@dataclass(frozen=True)
class Bucket:
    """One collective that can start ``ready_s`` seconds after the backward began."""

    ready_s: float
    nbytes: float
    op: str = "all_reduce"

    def __post_init__(self) -> None:
        if not (self.ready_s >= 0 and math.isfinite(self.ready_s)):
            raise ValueError(f"Bucket.ready_s={self.ready_s}: must be >= 0 seconds after the backward began")
        if not self.nbytes >= 0:
            raise ValueError(f"Bucket.nbytes={self.nbytes}: must be >= 0")


@dataclass(frozen=True)
class MicroStep:
    """One micro-step's measured compute and the buckets its backward produces."""

    forward_s: float
    backward_s: float
    buckets: Sequence[Bucket] = ()

    def __post_init__(self) -> None:
        if self.forward_s < 0 or self.backward_s < 0:
            raise ValueError(f"MicroStep: forward_s={self.forward_s}, backward_s={self.backward_s} must be >= 0")


@dataclass(frozen=True)
class Contention:
    """How much overlapping compute and communication slow each other, as fractions: with
    ``compute=0.2`` the backward runs 20 % slower while a transfer is in flight; with ``comm=0.1``
    a transfer runs 10 % slower while the backward computes. Measure them, do not guess them (lab
    3's real-link validation, ``tools/validate_link``, times a backward alone and beside the
    buckets' all-reduces)."""

    compute: float = 0.0
    comm: float = 0.0

    def __post_init__(self) -> None:
        for name in ("compute", "comm"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"Contention.{name}={v!r}: a slowdown fraction >= 0 (0.2 = 20 % slower)")


@dataclass(frozen=True)
class Transfer:
    """When one bucket's collective ran on the link (seconds from the backward's start)."""

    bucket: Bucket
    start_s: float
    end_s: float


@dataclass(frozen=True)
class OverlapStep:
    """A backward and its communication: ``end_s`` is when the optimizer may start."""

    backward_s: float
    transfers: list[Transfer] = field(default_factory=list)

    @property
    def end_s(self) -> float:
        return max([self.backward_s] + [t.end_s for t in self.transfers])

    @property
    def comm_s(self) -> float:
        """Seconds the link was busy."""
        return sum(t.end_s - t.start_s for t in self.transfers)

    @property
    def exposed_s(self) -> float:
        """Communication the backward did not hide: what the step waits beyond its compute."""
        return self.end_s - self.backward_s


def _check(world_size: int, k: int = 1) -> None:
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(f"world_size={world_size!r}: must be an int >= 1 (the number of ranks)")
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"k={k!r}: must be an int >= 1 (micro-steps per update)")


def backward_with_comm(
    buckets: Sequence[Bucket],
    backward_s: float,
    link: Link,
    world_size: int,
    *,
    contention: Contention | None = None,
) -> OverlapStep:
    """The backward with each bucket's collective queued on ``link`` as soon as it is ready.

    Transfers go in order of ``ready_s``. DDP sends buckets in bucket order instead; the two agree
    whenever ready times rise with the bucket index, as they do for DDP's rebuilt buckets (filled
    in the order the backward makes the gradients). With ``contention``, ``ready_s`` and
    ``backward_s`` are compute seconds measured without communication; the returned
    ``backward_s`` is when the slowed compute really ended."""
    _check(world_size)
    if any(b.ready_s > backward_s * (1 + 1e-9) + 1e-12 for b in buckets):
        raise ValueError(f"a bucket is ready after the backward ended ({backward_s} s): ready_s must be <= backward_s")
    if contention is not None and not isinstance(contention, Contention):
        raise TypeError(f"contention must be a netmodel.Contention or None, got {type(contention).__name__}")
    if contention is not None and (contention.compute or contention.comm):
        return _contended(buckets, backward_s, link, world_size, contention)
    free, transfers = 0.0, []
    for b in sorted(buckets, key=lambda b: b.ready_s):
        start = max(b.ready_s, free)
        free = start + collective_seconds(b.op, b.nbytes, world_size, link)
        transfers.append(Transfer(b, start, free))
    return OverlapStep(backward_s, transfers)


def _contended(buckets: Sequence[Bucket], backward_s: float, link: Link, p: int, c: Contention) -> OverlapStep:
    """The same queue, stepped event by event: compute progresses at 1 / (1 + c.compute) while a
    transfer is in flight, a transfer at 1 / (1 + c.comm) while compute runs."""
    order = sorted(buckets, key=lambda b: b.ready_s)
    left_of = [collective_seconds(b.op, b.nbytes, p, link) for b in order]
    t = done = 0.0  # wall clock; compute progress in uncontended seconds
    nxt, queued, cur, left, start, compute_end = 0, [], None, 0.0, 0.0, None
    transfers: list[Transfer] = []
    eps = 1e-15 * max(1.0, backward_s)
    while True:
        while nxt < len(order) and order[nxt].ready_s <= done + eps:
            queued.append(nxt)
            nxt += 1
        if cur is None and queued:
            cur, start = queued.pop(0), t
            left = left_of[cur]
        computing = done < backward_s - eps
        if not computing and compute_end is None:
            compute_end = t
        if cur is None and not computing:
            break
        rate_compute = 1.0 / (1.0 + c.compute) if cur is not None else 1.0
        rate_comm = 1.0 / (1.0 + c.comm) if computing else 1.0
        steps = []
        if computing:
            target = min(order[nxt].ready_s, backward_s) if nxt < len(order) else backward_s
            steps.append((target - done) / rate_compute)
        if cur is not None:
            steps.append(left / rate_comm)
        dt = max(0.0, min(steps))
        t += dt
        if computing:
            done = min(backward_s, done + dt * rate_compute)
        if cur is not None:
            left -= dt * rate_comm
            if left <= eps * 10:
                transfers.append(Transfer(order[cur], start, t))
                cur = None
    return OverlapStep(compute_end if compute_end is not None else t, transfers)


def backward_then_comm(buckets: Sequence[Bucket], backward_s: float, link: Link, world_size: int) -> OverlapStep:
    """The old sum, for comparison: every collective waits for the whole backward (no overlap)."""
    return backward_with_comm([Bucket(backward_s, b.nbytes, b.op) for b in buckets], backward_s, link, world_size)


def naive_update_seconds(
    micro: MicroStep,
    k: int,
    link: Link,
    world_size: int,
    *,
    optimizer_s: float = 0.0,
    contention: Contention | None = None,
) -> float:
    """Seconds per update when every one of ``k`` micro-steps all-reduces (overlapped)."""
    return _update(micro, k, k, link, world_size, optimizer_s, contention)


def no_sync_update_seconds(
    micro: MicroStep,
    k: int,
    link: Link,
    world_size: int,
    *,
    optimizer_s: float = 0.0,
    contention: Contention | None = None,
) -> float:
    """Seconds per update when ``k - 1`` micro-steps run under ``no_sync`` and the last one all-reduces."""
    return _update(micro, k, 1, link, world_size, optimizer_s, contention)


def _update(micro: MicroStep, k: int, synced: int, link: Link, world_size: int, optimizer_s: float,
            contention: Contention | None) -> float:  # fmt: skip
    """``synced`` of ``k`` micro-steps all-reduce, overlapped with their backward; the rest only compute."""
    _check(world_size, k)
    step = backward_with_comm(micro.buckets, micro.backward_s, link, world_size, contention=contention)
    return synced * (micro.forward_s + step.end_s) + (k - synced) * (micro.forward_s + micro.backward_s) + optimizer_s


def serial_seconds(ops: Sequence[tuple[str, float]], link: Link, world_size: int) -> float:
    """Collectives with nothing to hide behind (``(op, nbytes)`` pairs one after another), such as
    local SGD's parameter averaging after the optimizer step: the overlap model with no compute."""
    _check(world_size)
    return sum(collective_seconds(op, n, world_size, link) for op, n in ops)


def evenly_ready(bucket_bytes: Sequence[float], backward_s: float, op: str = "all_reduce") -> list[Bucket]:
    """Buckets in the order the backward fills them, each ready when the backward has produced
    its share of all gradient bytes: a stand-in for measured ready times."""
    total = float(sum(bucket_bytes))
    if total <= 0:
        raise ValueError(f"bucket_bytes={list(bucket_bytes)!r}: need at least one non-empty bucket")
    done, out = 0.0, []
    for n in bucket_bytes:
        done += n
        out.append(Bucket(backward_s * done / total, n, op))
    return out
