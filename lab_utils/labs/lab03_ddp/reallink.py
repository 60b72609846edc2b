"""The overlap model against a real slow link: the stored result the lab shows, and its table.

    real = reallink.load()                    # the stored run (real_link.json, beside this module)
    print(reallink.table(real))               # links, points + the 10 % verdicts, savings, terms
    print(reallink.table(real, parts=("links", "savings")))   # one part or two, each under 20 lines
    reallink.misses(p.measured_terms, p.model_terms)   # one point's miss, term by term

The measurement itself is root-only apparatus outside this package (``tools/validate_link``):
one gloo rank in each of two network namespaces joined by a veth pair shaped with tc tbf, run by
``sudo make validate-link`` (a few minutes), which rewrites ``real_link.json``. Per link speed
it calibrates the link, measures the contention and times the naive and ``no_sync`` loops,
stamping every update; each point is compared with the overlap model, without and with the
contention, and its median update is split into terms so that a miss names the term the model
got wrong:

    measured = compute + wait + rest          (rank 0's stamps, ``stamps.Update``)
    wait     = peer + link                     (the other rank's stamps, same clock)
    model    = compute + exposed + optimizer   (the overlap model, the same inputs)

``compute`` is forward + backward as they ran beside the link; ``wait`` is the time after a
synchronised backward's compute before the next forward (or the optimizer) could start. Of it,
``peer`` is the part while the other rank was still computing that micro-step (its buckets were
not ready: the model's ranks are identical, so it has no such term), and ``link`` the rest: the
all-reduces still on the wire once both ranks had computed, and DDP copying the buckets back.
``rest`` is the optimizer step and everything else of the update (``zero_grad``, the loop).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab_utils.netmodel import Bucket, Contention, Link, MicroStep, naive_update_seconds, no_sync_update_seconds

__all__ = ["Config", "Terms", "Point", "Result", "STORED", "MISS_TERMS", "load", "runs", "signed", "headline",
           "reruns", "noise_floor", "scaled", "predicted", "cross_predictions", "table", "PARTS", "misses"]  # fmt: skip

STORED = Path(__file__).with_name("real_link.json")
"""The table the lab shows: measured on the machine and at the time it records."""


@dataclass(frozen=True)
class Config:
    """One validation: link speeds as ``rounds`` (an all-reduce round of all gradients costs that
    many backwards: > 1 communication-bound, < 1 compute-bound), ``ks``, ``repeats`` per point."""

    rounds: tuple[float, ...] = (3.0, 1.0, 0.3)
    ks: tuple[int, ...] = (1, 2, 4)
    repeats: int = 7
    micro_batch: int = 1024
    width: int = 256
    depth: int = 4
    bucket_cap_mb: float = 0.25
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.rounds or not all(r > 0 for r in self.rounds):
            raise ValueError(f"rounds={self.rounds!r}: give link speeds as round times in backwards, each > 0")
        if not self.ks or not all(isinstance(k, int) and k >= 1 for k in self.ks):
            raise ValueError(f"ks={self.ks!r}: micro-steps per update, ints >= 1")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats}: at least 1 (an odd number gives a true median)")


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


@dataclass(frozen=True)
class Point:
    """One link, K and loop: the measured seconds per update (median, quartiles of the repeats)
    against the model without and with contention."""

    rate_mbit: float
    k: int
    loop: str
    measured_s: float
    q1_s: float
    q3_s: float
    model_s: float
    contended_s: float
    measured_terms: Terms | None = None  # the median repeat split into terms
    model_terms: Terms | None = None  # the model with contention, in the same terms

    @property
    def error(self) -> float:
        """The plain model's signed error, (model - measured) / measured: below 0 it predicted too little."""
        return self.model_s / self.measured_s - 1

    @property
    def contended_error(self) -> float:
        """The same for the model with this run's contention."""
        return self.contended_s / self.measured_s - 1


@dataclass
class Result:
    """A validation run: its points, the savings (naive - no_sync, per repeat pair), each link's
    calibration and contention, the micro-step, and where and when it ran (load included)."""

    points: list[Point]
    savings: list[dict]
    links: list[dict]
    micro: dict
    when: str
    load_before: str
    load_after: str
    machine: str
    config: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def load(path: str | os.PathLike = STORED) -> Result:
    """A stored validation (``sudo make validate-link`` writes the one the lab shows)."""
    raw = json.loads(Path(path).read_text())
    raw["points"] = [Point(**_terms(p)) for p in raw["points"]]
    return Result(**raw)


def runs() -> list[Result]:
    """Every stored run, oldest first: the earlier ones kept beside the module
    (``real_link.<date>-<time>.json``) and the one the lab shows. All share one ``Config``, not one
    apparatus: the first two (2026-12-01 16:07 and 17:10 UTC) came from an earlier
    ``tools/validate_link`` that measured the contention beside one bulk all-reduce of all gradients
    and took the latency from a tiny message (their links have no ``round_s``, ``bucket_alpha_s`` or
    ``preempted``); the later ones use rounds of the real buckets and a per-bucket latency."""
    return [load(f) for f in sorted(STORED.parent.glob("real_link.*.json"))] + [load()]


def signed(errors: Sequence[float]) -> str:
    """Signed errors as 'mean +x %, range a .. b %'."""
    mean = sum(errors) / len(errors)
    return f"mean {100 * mean:+.0f} %, range {100 * min(errors):+.0f} .. {100 * max(errors):+.0f} %"


def headline(result: Result, k: int) -> str:
    """What ``no_sync`` saved per update at ``k`` on each link (the median of the repeats' paired
    differences naive - no_sync), the plain model's prediction and its signed error."""
    lines = [f"{'Mbit/s':>7}{'measured ms':>13}{'model ms':>10}{'model error':>13}"]
    for s in result.savings:
        if s["k"] == k:
            err = f"{100 * (s['model_s'] / s['measured_s'] - 1):+.0f} %" if s["measured_s"] > 0 else "-"
            lines.append(f"{s['rate_mbit']:>7.0f}{1e3 * s['measured_s']:>13.1f}{1e3 * s['model_s']:>10.1f}{err:>13}")
    return "\n".join(lines)


def reruns(results: Sequence[Result]) -> str:
    """One line per stored run: when, the load before it, the link speeds, and each model's signed
    error over all its points."""
    lines = []
    for r in results:
        rates = "/".join(f"{lk['rate_mbit']:.0f}" for lk in r.links)
        lines += [
            f"{r.when}, load {r.load_before.split()[0]}, {rates} Mbit/s; K = 1 pairs up to "
            f"{100 * noise_floor(r):.0f} % apart",
            f"  model: {signed([p.error for p in r.points])}; "
            f"+ its contention: {signed([p.contended_error for p in r.points])}",
        ]
    return "\n".join(lines)


def noise_floor(result: Result) -> float:
    """How far apart the two K = 1 points of one link are at most (naive and ``no_sync`` run the
    same code there): |naive / no_sync - 1| of the measured medians."""
    one = {(p.rate_mbit, p.loop): p.measured_s for p in result.points if p.k == 1}
    return max(abs(one[r, "naive"] / one[r, "no_sync"] - 1) for r, loop in one if loop == "naive")


def scaled(micro: MicroStep, factor: float) -> MicroStep:
    """``micro`` with its forward, backward and buckets' ready times times ``factor`` (the stamps
    rescaled to a compute-only loop timed later: the machine's speed drifts)."""
    return MicroStep(micro.forward_s * factor, micro.backward_s * factor,
                     [Bucket(b.ready_s * factor, b.nbytes, b.op) for b in micro.buckets])  # fmt: skip


def predicted(calibration: Result, target: Result) -> list[float]:
    """``target``'s timed loops predicted from ``calibration``'s link and contention, each point's
    signed error (model / measured - 1).

    From ``target`` only what its run set or timed without communication: the stamped micro-step
    (its buckets' ready times and sizes, ``micro["bucket_list"]``, stored since 2026-12-02), the tbf
    rate, K, the optimizer step, and each link's ``compute_scale``: its compute-only loop (no
    communication, timed in the same session as the loops predicted) over the stamps. That rescale
    decides the sign (without it the model reads several % high). From ``calibration``, link by link
    (same index: the runs share ``Config.rounds``): the bandwidth as a fraction of the tbf rate, the
    per-bucket latency and the contention. Calibrating a run with itself gives its own
    "+ contention" model."""
    if "bucket_list" not in target.micro:
        raise ValueError(f"the run of {target.when} stored no bucket ready times: it cannot be predicted anew")
    if calibration.config.get("rounds") != target.config.get("rounds") or len(calibration.links) != len(target.links):
        raise ValueError("the two runs have different link configs: their links do not pair up")
    buckets = [Bucket(**b) for b in target.micro["bucket_list"]]
    stamped = MicroStep(target.micro["forward_s"], target.micro["backward_s"], buckets)
    opt, fns = target.micro["optimizer_s"], {"naive": naive_update_seconds, "no_sync": no_sync_update_seconds}
    errors = []
    for p in target.points:
        i = next(j for j, lk in enumerate(target.links) if lk["rate_mbit"] == p.rate_mbit)
        cal, own = calibration.links[i], target.links[i]
        micro = scaled(stamped, own["compute_scale"])
        efficiency = cal["beta_Bps"] / (cal["rate_mbit"] * 1e6 / 8)
        link = Link("predicted", cal.get("bucket_alpha_s", cal["alpha_s"]), efficiency * p.rate_mbit * 1e6 / 8)
        model = fns[p.loop](micro, p.k, link, 2, optimizer_s=opt, contention=Contention(*cal["contention"]))
        errors.append(model / p.measured_s - 1)
    return errors


def cross_predictions(results: Sequence[Result]) -> dict[tuple[str, str], list[float]]:
    """Every run that stored its buckets' ready times, predicted anew (``predicted``) from each
    other run of the same apparatus (rounds of the real buckets: a ``round_s`` per link), with the
    overlap model as it is now: {(target's when, calibration's when): signed errors}."""
    same = [r for r in results if all("round_s" in lk for lk in r.links)]
    return {(t.when, c.when): predicted(c, t) for t in same if "bucket_list" in t.micro for c in same if c is not t}


def _terms(p: dict) -> dict:
    return {k: Terms(**v) if k.endswith("_terms") and v is not None else v for k, v in p.items()}


MISS_TERMS = ("compute", "peer", "link", "rest")
_WIDTH = {"compute": 8, "peer": 6, "link": 6, "rest": 5}


def misses(measured: Terms, model: Terms) -> dict[str, float]:
    """Measured - modelled seconds, term by term; they add up to the whole miss: compute as it
    ran against the model's, the wait for the other rank (the model has none), the wait on the
    link against the model's exposed communication, and the rest against its optimizer step."""
    return {"compute": measured.compute_s - model.compute_s, "peer": measured.peer_s,
            "link": measured.link_s - model.wait_s, "rest": measured.rest_s - model.rest_s}  # fmt: skip


PARTS = ("links", "points", "savings", "terms")
"""The parts of ``table``: the links, every point with the 10 % verdicts, the savings, the terms."""


def table(result: Result, parts: Sequence[str] = PARTS) -> str:
    """The validation as text, the ``parts`` asked for (all by default; a notebook cell shows one
    or two, each under 20 lines): links, points and the 10 % verdict per model, savings, terms."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; the parts are {PARTS}")
    out = []
    if "links" in parts:
        out.append(_links(result))
    if "points" in parts:
        out.append(_points(result))
    if "savings" in parts:
        out.append(_savings(result))
    if "terms" in parts and any(p.measured_terms is not None for p in result.points):
        out.append(_terms_table(result.points))
    return "\n\n".join(out)


def _links(result: Result) -> str:
    lines = [f"real link (veth + tc tbf), {result.machine}; measured {result.when}",
             f"load (/proc/loadavg) before: {result.load_before}; after: {result.load_after}",
             f"micro-step: forward {1e3 * result.micro['forward_s']:.1f} ms, backward "
             f"{1e3 * result.micro['backward_s']:.1f} ms, {result.micro['buckets']} buckets, "
             f"{result.micro['grad_bytes'] / 2**20:.2f} MiB of gradients", "",
             f"{'tbf Mbit/s':>10}{'calibrated Mbit/s':>19}{'latency us: tiny':>18}{'per bucket':>11}"
             f"{'contention compute':>20}{'comm':>7}{'its CPU':>9}{'preempted alone/beside':>24}"
             f"{'compute now / stamped':>23}"]  # fmt: skip
    for lk in result.links:
        per_bucket = f"{1e6 * lk['bucket_alpha_s']:>11.0f}" if "bucket_alpha_s" in lk else f"{'-':>11}"
        cpu = f"{100 * lk['compute_cpu']:>8.0f}%" if "compute_cpu" in lk else f"{'-':>9}"
        cpu += f"{lk['preempted'][0]:>14.0f} / {lk['preempted'][1]:<7.0f}" if "preempted" in lk else f"{'-':>24}"
        lines.append(f"{lk['rate_mbit']:>10.0f}{8 * lk['beta_Bps'] / 1e6:>19.0f}{1e6 * lk['alpha_s']:>18.0f}"
                     f"{per_bucket}"
                     f"{100 * lk['contention'][0]:>19.0f}%{100 * lk['contention'][1]:>6.0f}%{cpu}"
                     f"{lk['compute_scale']:>23.2f}")  # fmt: skip
    return "\n".join(lines)


def _points(result: Result) -> str:
    lines = [f"{'Mbit/s':>7}{'K':>3} {'loop':<8}{'measured ms (q1-q3)':>22}{'model':>8}{'error':>7}"
              f"{'+contention':>12}{'error':>7}"]  # fmt: skip
    for p in result.points:
        lines.append(f"{p.rate_mbit:>7.0f}{p.k:>3} {p.loop:<8}{1e3 * p.measured_s:>9.1f} ({1e3 * p.q1_s:5.1f}-"
                     f"{1e3 * p.q3_s:5.1f}){1e3 * p.model_s:>8.1f}{100 * p.error:>+6.0f}%{1e3 * p.contended_s:>12.1f}"
                     f"{100 * p.contended_error:>+6.0f}%")  # fmt: skip
    for label, attr in (("model", "error"), ("model + contention", "contended_error")):
        errs = [abs(getattr(p, attr)) for p in result.points]
        within = sum(e <= 0.10 for e in errs)
        lines.append(
            f"{label}: within 10 % at {within} of {len(errs)} points; signed error "
            f"{signed([getattr(p, attr) for p in result.points])}"
        )
    return "\n".join(lines)


def _savings(result: Result) -> str:
    lines = [f"{'Mbit/s':>7}{'K':>3}{'saving ms: measured (min..max)':>32}{'model':>8}{'+contention':>12}"]
    for s in result.savings:
        lines.append(f"{s['rate_mbit']:>7.0f}{s['k']:>3}{1e3 * s['measured_s']:>14.1f} ({1e3 * s['lo_s']:6.1f} .."
                     f"{1e3 * s['hi_s']:6.1f}){1e3 * s['model_s']:>8.1f}{1e3 * s['contended_s']:>12.1f}")  # fmt: skip
    return "\n".join(lines)


def _terms_table(points: Sequence[Point], *, bar: float = 0.10) -> str:
    """Each point's median repeat in terms, measured and modelled (with contention), and the miss
    split by term; ``*`` marks the points the model misses by more than ``bar``, with their
    largest term."""
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
