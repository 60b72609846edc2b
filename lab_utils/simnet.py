"""A modelled network: what the collectives a run *measured* would cost on a given link.

    allreduce_seconds(100e6, world_size=8, link=LINKS["10GbE"])    # one 100 MB ring all-reduce
    comm_seconds(counter.events, LINKS["1GbE"], world_size=2)      # per-step modelled seconds

A model, not a measurement (labs label it "modelled"): the alpha-beta model (Patarasuk & Yuan
2009; Thakur et al. 2005), with p ranks, n bytes, latency alpha, bandwidth beta:

    ring all-reduce  = 2 (p - 1) alpha + 2 (p - 1) / p * n / beta
    tree all-reduce  = 2 log2(p) (alpha + n / beta)   # reduce then broadcast, not pipelined
    broadcast (tree) = log2(p) (alpha + n / beta)

Collectives are costed one after another; for those hidden behind the backward see ``overlap``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Link", "LINKS", "allreduce_seconds", "collective_seconds", "comm_seconds", "ALGORITHMS"]

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
