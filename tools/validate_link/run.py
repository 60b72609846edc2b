"""Lab 3's overlap model against a real slow link: one gloo rank in each of two network
namespaces joined by a veth pair shaped with tc tbf (``netns``; root only: for instructors and CI).

    sudo make validate-link                               # or, as root, at the repository root:
    python -m tools.validate_link.run --out lab_utils/labs/lab03_ddp/real_link.json

The ranks (``rank``) stamp a typical micro-step on the unshaped veth, then per link speed
calibrate the link, measure the contention and time the naive and ``no_sync`` loops, stamping
every update. Here the times are compared with the overlap model, without and with the
contention, and each point's median update is split into terms (``update``, ``measured``,
``modelled``; the terms are defined in ``lab_utils.labs.lab03_ddp.reallink``) so that a miss
names the term the model got wrong. Both ranks run in one machine's network namespaces and share
its monotonic clock, so their stamps compare directly. Every step is bounded in time.

The result goes into the package's data module (``reallink.Result``), whose ``load`` and
``table`` the lab uses to show it; nothing in ``lab_utils`` imports this package.
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
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lab_utils.labs.lab03_ddp.reallink import Config, Point, Result, Terms, scaled, table
from lab_utils.labs.lab03_ddp.stamps import Micro, Update
from lab_utils.netmodel import (
    Bucket,
    Contention,
    Link,
    MicroStep,
    backward_with_comm,
    naive_update_seconds,
    no_sync_update_seconds,
)
from tools.validate_link.netns import Namespaces, unavailable

__all__ = ["run", "update", "measured", "modelled", "main"]

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: ``tools`` is not installed, so the ranks find it on their path from here."""

_RANK_MODULE = "tools.validate_link.rank"


def run(config: Config | None = None, *, log=print) -> Result:
    """Build the link, run both ranks on it, tear it down, and compare with the model (``config``:
    ``Config()`` by default)."""
    config = config or Config()
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
                # ``tools`` is not installed: the rank module is found from the repository root
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
                cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", _RANK_MODULE, work]
                procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True))
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
        micro = scaled(stamped, scale)
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
                pair = [update(r["links"][i]["stamps"][str(k)][name][mid]) for r in ranks]
                terms = modelled(micro, k, name, link, optimizer_s=opt, contention=cont)
                points.append(Point(lk["rate_mbit"], k, name, statistics.median(walls[name]), q[0], q[2], plain,
                                    contended, measured(*pair), terms))  # fmt: skip
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
            "bucket_list": [asdict(b) for b in stamped.buckets],  # ready_s, nbytes, op: the model anew
            "optimizer_s": opt,
            "grad_bytes": sum(b.nbytes for b in stamped.buckets),
        },  # fmt: skip
        when=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        load_before=load_before,
        load_after=Path("/proc/loadavg").read_text().strip(),
        machine=f"{os.cpu_count()} CPU cores, gloo, 2 ranks in 2 network namespaces",
        config=asdict(config),
    )


def update(raw: Mapping[str, Any]) -> Update:
    """A ``stamps.Update`` back from its JSON form (``dataclasses.asdict``)."""
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
        kept = keep_previous(Path(args.out))
        Path(args.out).write_text(result.to_json())
        print(f"written: {args.out}" + (f" (the run it held kept as {kept})" if kept else ""))
    return 0


def keep_previous(out: Path) -> Path | None:
    """Before a new run overwrites ``out``, keep the run it holds beside it as
    ``<stem>.<date>-<time>.json`` (its own ``when``), so every rerun stays stored
    (``reallink.runs`` reads them all)."""
    if not out.exists():
        return None
    when = json.loads(out.read_text())["when"]  # "2026-12-01 23:31 UTC"
    kept = out.with_name(f"{out.stem}.{when[:16].replace(' ', '-').replace(':', '')}.json")
    if not kept.exists():
        kept.write_text(out.read_text())
    return kept


if __name__ == "__main__":
    sys.exit(main())
