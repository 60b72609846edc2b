"""One update of the real-link validation split into terms, measured and modelled, so a miss of
the model says which term it got wrong.

    measured = compute + wait + rest          (rank 0's stamps, ``timing.Update``)
    wait     = peer + link                     (the other rank's stamps, same clock)
    model    = compute + exposed + optimizer   (``overlap``, the same inputs as the validation)

``compute`` is forward + backward as they ran beside the link; ``wait`` is the time after a
synchronised backward's compute before the next forward (or the optimizer) could start. Of it,
``peer`` is the part while the other rank was still computing that micro-step (its buckets were
not ready: the model's ranks are identical, so it has no such term), and ``link`` the rest: the
all-reduces still on the wire once both ranks had computed, and DDP copying the buckets back.
``rest`` is the optimizer step and everything else of the update (``zero_grad``, the loop).
Both ranks run in one machine's network namespaces and share its monotonic clock, so their
stamps compare directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab_utils.labs.lab03_ddp.timing import Micro, Update
from lab_utils.netmodel import Contention, Link, MicroStep, backward_with_comm

__all__ = ["Terms", "update", "measured", "modelled", "misses", "table"]


@dataclass(frozen=True)
class Terms:
    """Seconds of one update: ``compute + wait + rest`` (``wait = peer + link``)."""

    compute_s: float
    wait_s: float
    peer_s: float
    rest_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.wait_s + self.rest_s

    @property
    def link_s(self) -> float:
        return self.wait_s - self.peer_s


def update(raw: Mapping[str, Any]) -> Update:
    """A ``timing.Update`` back from its JSON form (``dataclasses.asdict``)."""
    micros = [Micro(**m) for m in raw["micros"]]
    return Update(raw["begin"], raw["end"], micros, list(raw["optimizer"]))


def measured(mine: Update, peer: Update) -> Terms:
    """Rank 0's update (``mine``) split into terms, the other rank's same update (``peer``)
    saying how long each synchronised micro-step waited for its compute."""
    if len(mine.micros) != len(peer.micros):
        raise ValueError(f"the ranks stamped {len(mine.micros)} and {len(peer.micros)} micro-steps")
    t = mine.terms()
    waited = 0.0
    for i, (m, p) in enumerate(zip(mine.micros, peer.micros)):
        if m.allreduces:
            nxt = mine.micros[i + 1].forward0 if i + 1 < len(mine.micros) else mine.optimizer[0]
            waited += min(nxt, max(m.compute_end, p.compute_end)) - m.compute_end
    return Terms(t["forward_s"] + t["backward_s"], t["wait_s"], waited, t["optimizer_s"] + t["other_s"])


def modelled(
    micro: MicroStep,
    k: int,
    loop: str,
    link: Link,
    *,
    optimizer_s: float,
    contention: Contention | None = None,
) -> Terms:
    """The overlap model's update in the same terms (``loop``: "naive" or "no_sync"): its
    compute is slowed where a transfer overlaps it (``contention``), its wait is the exposed
    communication, and it has no ``peer`` term (identical ranks)."""
    if loop not in ("naive", "no_sync"):
        raise ValueError(f"loop={loop!r}: 'naive' or 'no_sync'")
    synced = k if loop == "naive" else 1
    step = backward_with_comm(micro.buckets, micro.backward_s, link, 2, contention=contention)
    compute = k * micro.forward_s + (k - synced) * micro.backward_s + synced * step.backward_s
    return Terms(compute, synced * step.exposed_s, 0.0, optimizer_s)


MISS_TERMS = ("compute", "peer", "link", "rest")
_WIDTH = {"compute": 8, "peer": 6, "link": 6, "rest": 5}


def misses(measured: Terms, model: Terms) -> dict[str, float]:
    """Measured - modelled seconds, term by term; they add up to the whole miss: compute as it
    ran against the model's, the wait for the other rank (the model has none), the wait on the
    link against the model's exposed communication, and the rest against its optimizer step."""
    return {"compute": measured.compute_s - model.compute_s, "peer": measured.peer_s,
            "link": measured.link_s - model.wait_s, "rest": measured.rest_s - model.rest_s}  # fmt: skip


def table(points: Sequence[Any], *, bar: float = 0.10) -> str:
    """Each point's median repeat in terms, measured and modelled (with contention), and the miss
    split by term; ``*`` marks the points the model misses by more than ``bar``, with their
    largest term. ``points``: ``reallink.Point``s."""
    lines = ["where the time went, ms (the median repeat, rank 0) against the model with contention:",
             f"{'Mbit/s':>7}{'K':>3} {'loop':<8}{'measured':>9}{'compute':>8}{'peer':>6}{'link':>6}{'rest':>5}"
             f" |{'model':>6}{'compute':>8}{'wait':>6}{'rest':>5} |{'miss':>6}{'compute':>8}{'peer':>6}{'link':>6}"
             f"{'rest':>5}  largest"]  # fmt: skip
    for p in points:
        m, o = p.measured_terms, p.model_terms
        if m is None or o is None:
            continue
        off = misses(m, o)
        flag = f"* {max(off, key=lambda t: abs(off[t]))}" if abs(m.total_s / o.total_s - 1) > bar else ""
        lines.append(f"{p.rate_mbit:>7.0f}{p.k:>3} {p.loop:<8}{1e3 * m.total_s:>9.1f}{1e3 * m.compute_s:>8.1f}"
                     f"{1e3 * m.peer_s:>6.1f}{1e3 * m.link_s:>6.1f}{1e3 * m.rest_s:>5.1f} |{1e3 * o.total_s:>6.1f}"
                     f"{1e3 * o.compute_s:>8.1f}{1e3 * o.wait_s:>6.1f}{1e3 * o.rest_s:>5.1f} |"
                     f"{1e3 * (m.total_s - o.total_s):>+6.1f}"
                     + "".join(f"{1e3 * off[t]:>+{_WIDTH[t]}.1f}" for t in MISS_TERMS)
                     + f"  {flag}")  # fmt: skip
    return "\n".join(lines)
