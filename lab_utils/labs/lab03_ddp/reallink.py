"""The overlap model against a real slow link: one gloo rank in each of two network namespaces
joined by a veth pair shaped with tc tbf (``netns``; root only: for instructors and CI).

    sudo make validate-link                               # or, as root:
    python -m lab_utils.labs.lab03_ddp.reallink --out lab_utils/labs/lab03_ddp/real_link.json

The ranks (``reallink_rank``) stamp a typical micro-step on the unshaped veth, then per link
speed calibrate the link, measure the contention and time the naive and ``no_sync`` loops,
stamping every update. Here the times are compared with the overlap model, without and with the
contention, and each point's median update is split into terms (``breakdown``) so that a miss
names the term the model got wrong. Every step is bounded in time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from lab_utils.labs.lab03_ddp import breakdown
from lab_utils.labs.lab03_ddp.breakdown import Terms
from lab_utils.labs.lab03_ddp.netns import Namespaces, unavailable

__all__ = ["Config", "Point", "Result", "unavailable", "run", "table", "load", "STORED"]

STORED = Path(__file__).with_name("real_link.json")
"""The table the lab shows: measured on the machine and at the time it records."""

_RANK_MODULE = "lab_utils.labs.lab03_ddp.reallink_rank"


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
    measured_terms: Terms | None = None  # the median repeat split into terms (``breakdown``)
    model_terms: Terms | None = None  # the model with contention, in the same terms

    @property
    def error(self) -> float:
        return self.measured_s / self.model_s - 1

    @property
    def contended_error(self) -> float:
        return self.measured_s / self.contended_s - 1


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
    """A stored validation (``python -m lab_utils.labs.lab03_ddp.reallink --out PATH`` writes one)."""
    raw = json.loads(Path(path).read_text())
    raw["points"] = [Point(**_terms(p)) for p in raw["points"]]
    return Result(**raw)


def _terms(p: dict) -> dict:
    return {k: Terms(**v) if k.endswith("_terms") and v is not None else v for k, v in p.items()}


def run(config: Config = Config(), *, log=print) -> Result:
    """Build the link, run both ranks on it, tear it down, and compare with the model."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    load_before = Path("/proc/loadavg").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="real-link-") as work, Namespaces() as net:
        Path(work, "config.json").write_text(json.dumps(asdict(config)))
        procs = []
        try:
            for rank, (ns, iface) in enumerate(zip(net.ns, net.iface)):
                env = dict(os.environ, RANK=str(rank), GLOO_SOCKET_IFNAME=iface, OMP_NUM_THREADS="1",
                           TORCH_CPP_LOG_LEVEL="ERROR")  # fmt: skip
                cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", _RANK_MODULE, work]
                procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))
            deadline = time.monotonic() + config.timeout_s
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        if any(p.returncode for p in procs):
            raise RuntimeError(f"a rank failed (exit codes {[p.returncode for p in procs]}); see its output above")
        ranks = [json.loads(Path(work, f"rank{r}.json").read_text()) for r in range(2)]
    result = _compare(ranks, config, load_before)
    log(table(result))
    return result


def _compare(ranks: list[dict], config: Config, load_before: str) -> Result:
    from lab_utils.netmodel import Bucket, Contention, Link, MicroStep, naive_update_seconds, no_sync_update_seconds

    r0 = ranks[0]
    m, opt = r0["micro"], r0["optimizer_s"]
    stamped = MicroStep(m["forward_s"], m["backward_s"], [Bucket(**b) for b in m["buckets"]])
    models = {"naive": naive_update_seconds, "no_sync": no_sync_update_seconds}
    points, savings, links = [], [], []
    for i, lk in enumerate(r0["links"]):
        # Latency per bucket from a round of the real buckets on the idle link (a tiny message
        # alone understates what each mid-sized all-reduce pays); never below the tiny one's.
        sizes = [b.nbytes for b in stamped.buckets]
        per_bucket = (lk["round_s"] - sum(sizes) / lk["beta_Bps"]) / (2 * len(sizes)) if "round_s" in lk else 0.0
        link = Link(f"tbf {lk['rate_mbit']:.0f} Mbit/s", max(lk["alpha_s"], per_bucket), lk["beta_Bps"])
        cont = Contention(*(statistics.mean(r["links"][i]["contention"][j] for r in ranks) for j in (0, 1)))
        # the compute thread's own CPU time, and how often it lost its core (worst rank)
        compute_cpu = statistics.mean(r["links"][i]["contention"][2] for r in ranks)
        preempted = [max(r["links"][i]["contention"][j] for r in ranks) for j in (3, 4)]
        # The machine's speed drifts (other programs): the stamps are rescaled to the compute-only
        # updates timed beside this link's runs (no communication, so no link in them).
        # The slowest rank sets the pace of a synchronised update.
        local = max(sum(statistics.median(r["links"][i]["walls"][str(k)]["compute"]) for k in config.ks)
                    for r in ranks)  # fmt: skip
        scale = local / sum(k * (stamped.forward_s + stamped.backward_s) + opt for k in config.ks)
        micro = _scaled(stamped, scale)
        links.append(dict({key: v for key, v in lk.items() if key not in ("walls", "stamps")},
                          contention=[cont.compute, cont.comm], compute_cpu=compute_cpu, preempted=preempted,
                          bucket_alpha_s=link.latency_s, compute_scale=scale))  # fmt: skip
        for k in config.ks:
            walls = {name: lk["walls"][str(k)][name] for name in models}
            for name, fn in models.items():
                q = statistics.quantiles(walls[name], n=4) if len(walls[name]) > 1 else [walls[name][0]] * 3
                plain = fn(micro, k, link, 2, optimizer_s=opt)
                contended = fn(micro, k, link, 2, optimizer_s=opt, contention=cont)
                mid = sorted(range(len(walls[name])), key=walls[name].__getitem__)[len(walls[name]) // 2]
                pair = [breakdown.update(r["links"][i]["stamps"][str(k)][name][mid]) for r in ranks]
                terms = breakdown.modelled(micro, k, name, link, optimizer_s=opt, contention=cont)
                points.append(Point(lk["rate_mbit"], k, name, statistics.median(walls[name]), q[0], q[2], plain,
                                    contended, breakdown.measured(*pair), terms))  # fmt: skip
            pairs = [a - b for a, b in zip(walls["naive"], walls["no_sync"])]
            savings.append({
                "rate_mbit": lk["rate_mbit"], "k": k, "measured_s": statistics.median(pairs),
                "lo_s": min(pairs), "hi_s": max(pairs),
                "model_s": models["naive"](micro, k, link, 2) - models["no_sync"](micro, k, link, 2),
                "contended_s": models["naive"](micro, k, link, 2, contention=cont)
                - models["no_sync"](micro, k, link, 2, contention=cont),
            })  # fmt: skip
    return Result(
        points=points,
        savings=savings,
        links=links,
        micro={
            "forward_s": stamped.forward_s,
            "backward_s": stamped.backward_s,
            "buckets": len(stamped.buckets),
            "optimizer_s": opt,
            "grad_bytes": sum(b.nbytes for b in stamped.buckets),
        },  # fmt: skip
        when=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        load_before=load_before,
        load_after=Path("/proc/loadavg").read_text().strip(),
        machine=f"{os.cpu_count()} CPU cores, gloo, 2 ranks in 2 network namespaces",
        config=asdict(config),
    )


def _scaled(micro, factor: float):
    from lab_utils.netmodel import Bucket, MicroStep

    buckets = [Bucket(b.ready_s * factor, b.nbytes, b.op) for b in micro.buckets]
    return MicroStep(micro.forward_s * factor, micro.backward_s * factor, buckets)


def table(result: Result) -> str:
    """The validation as text: links, points and savings, and the 10 % verdict per model."""
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
    lines += ["", f"{'Mbit/s':>7}{'K':>3} {'loop':<8}{'measured ms (q1-q3)':>22}{'model':>8}{'error':>7}"
              f"{'+contention':>12}{'error':>7}"]  # fmt: skip
    for p in result.points:
        lines.append(f"{p.rate_mbit:>7.0f}{p.k:>3} {p.loop:<8}{1e3 * p.measured_s:>9.1f} ({1e3 * p.q1_s:5.1f}-"
                     f"{1e3 * p.q3_s:5.1f}){1e3 * p.model_s:>8.1f}{100 * p.error:>6.0f}%{1e3 * p.contended_s:>12.1f}"
                     f"{100 * p.contended_error:>6.0f}%")  # fmt: skip
    lines += ["", f"{'Mbit/s':>7}{'K':>3}{'saving ms: measured (min..max)':>32}{'model':>8}{'+contention':>12}"]
    for s in result.savings:
        lines.append(f"{s['rate_mbit']:>7.0f}{s['k']:>3}{1e3 * s['measured_s']:>14.1f} ({1e3 * s['lo_s']:6.1f} .."
                     f"{1e3 * s['hi_s']:6.1f}){1e3 * s['model_s']:>8.1f}{1e3 * s['contended_s']:>12.1f}")  # fmt: skip
    if any(p.measured_terms is not None for p in result.points):
        lines += ["", breakdown.table(result.points)]
    for label, attr in (("model", "error"), ("model + contention", "contended_error")):
        errs = [abs(getattr(p, attr)) for p in result.points]
        within = sum(e <= 0.10 for e in errs)
        lines.append(f"{label}: within 10 % at {within} of {len(errs)} points (worst {100 * max(errs):.0f} %)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out", help="write the result as JSON here (the lab reads lab_utils/labs/lab03_ddp/real_link.json)"
    )
    ap.add_argument("--quick", action="store_true", help="K = 1, 2 and 3 repeats (a test of the machinery)")
    args = ap.parse_args(argv)
    config = Config(ks=(1, 2), repeats=3, micro_batch=256) if args.quick else Config()
    result = run(config)
    if args.out:
        Path(args.out).write_text(result.to_json())
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
