"""The overlap model against a real slow link: two network namespaces joined by a veth pair, each
end shaped with ``tc qdisc ... tbf``, one gloo rank in each (root only: for instructors and CI).

    sudo make validate-link                               # or, as root:
    python -m lab_utils.topics.ddp.reallink --out lab_utils/topics/ddp/real_link.json

What it does, all in one run (a few minutes at most; every step bounded in time):

1. makes two namespaces and a veth pair with names unique to this process, and removes them on
   every exit path (``finally``, SIGTERM and SIGINT included);
2. starts one rank in each namespace; on the unshaped veth they stamp a typical micro-step of lab
   3's model (``sweep.measure``: forward, backward, each bucket's ready time);
3. for each of ``rounds`` (one all-reduce round of the gradients = that many backwards), each rank
   shapes its own end to the rate that gives it, then calibrates the link from a tiny and a bulk
   all-reduce on it (latency, bandwidth), measures the contention (a backward timed alone and
   beside a running bulk all-reduce, and that all-reduce alone and beside the backward), and times
   ``repeats`` updates of the naive and ``no_sync`` loops at every K, alternating;
4. compares the measured time per update and the saving (median of the repeats, with their
   spread) with the overlap model fed the stamps of step 2 and the calibrated link, without and
   with the measured contention (``overlap.Contention``).

Traffic goes only between the veth addresses of the namespaces it made.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

__all__ = ["Config", "Point", "Result", "unavailable", "run", "table", "load", "STORED"]

STORED = Path(__file__).with_name("real_link.json")
"""The table the lab shows: measured on the machine and at the time it records."""

_ADDR = ("10.203.0.1", "10.203.0.2")
_PORT = 29617
_MODULE = "lab_utils.topics.ddp.reallink"


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
    """A stored validation (``python -m lab_utils.topics.ddp.reallink --out PATH`` writes one)."""
    raw = json.loads(Path(path).read_text())
    raw["points"] = [Point(**p) for p in raw["points"]]
    return Result(**raw)


def unavailable() -> str | None:
    """Why the real link cannot be built here (None when it can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the real link needs root (network namespaces and tc); run it as root, e.g. sudo make validate-link"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"the real link needs {' and '.join(missing)} (iproute2) on PATH"
    return None


class _Namespaces:
    """Two namespaces joined by a veth pair, named after this process; removed on exit."""

    def __init__(self) -> None:
        tag = f"l3v{os.getpid()}"
        self.ns = (f"{tag}a", f"{tag}b")
        self.iface = (f"{tag}a", f"{tag}b")  # one per namespace (a name is local to it)

    def __enter__(self) -> _Namespaces:
        self._old = {s: signal.signal(s, _raise_exit) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            for ns in self.ns:
                _ip("netns", "add", ns)
            _ip("link", "add", self.iface[0], "type", "veth", "peer", "name", self.iface[1])
            for ns, iface, addr in zip(self.ns, self.iface, _ADDR):
                _ip("link", "set", iface, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", iface)
                _ip("-n", ns, "link", "set", iface, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for ns in self.ns:  # deleting a namespace deletes its end of the veth, and so the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.iface[0]], capture_output=True, timeout=30)
        for s, old in self._old.items():
            signal.signal(s, old)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def _ip(*args: str) -> None:
    got = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if got.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {got.stderr.strip()}")


def run(config: Config = Config(), *, log=print) -> Result:
    """Build the link, run both ranks on it, tear it down, and compare with the model."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    load_before = Path("/proc/loadavg").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="real-link-") as work, _Namespaces() as net:
        Path(work, "config.json").write_text(json.dumps(asdict(config)))
        procs = []
        try:
            for rank, (ns, iface) in enumerate(zip(net.ns, net.iface)):
                env = dict(os.environ, RANK=str(rank), GLOO_SOCKET_IFNAME=iface, OMP_NUM_THREADS="1",
                           TORCH_CPP_LOG_LEVEL="ERROR")  # fmt: skip
                cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", _MODULE, "--rank-in", work]
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
    from lab_utils.overlap import Contention, naive_update, no_sync_update
    from lab_utils.simnet import Link
    from lab_utils.topics.ddp.sweep import micro_step

    r0 = ranks[0]
    stamped, opt = micro_step(r0["loopback"]), r0["loopback"]["optimizer_step_s"]
    models = {"naive": naive_update, "no_sync": no_sync_update}
    points, savings, links = [], [], []
    for i, lk in enumerate(r0["links"]):
        link = Link(f"tbf {lk['rate_mbit']:.0f} Mbit/s", lk["alpha_s"], lk["beta_Bps"])
        cont = Contention(*(statistics.mean(r["links"][i]["contention"][j] for r in ranks) for j in (0, 1)))
        # The machine's speed drifts (other programs): the stamps are rescaled to the compute-only
        # updates timed beside this link's runs (no communication, so no link in them).
        # The slowest rank sets the pace of a synchronised update.
        local = max(sum(statistics.median(r["links"][i]["walls"][str(k)]["compute"]) for k in config.ks)
                    for r in ranks)  # fmt: skip
        scale = local / sum(k * (stamped.forward_s + stamped.backward_s) + opt for k in config.ks)
        micro = _scaled(stamped, scale)
        links.append(dict({key: v for key, v in lk.items() if key != "walls"}, contention=[cont.compute, cont.comm],
                          compute_scale=scale))  # fmt: skip
        for k in config.ks:
            walls = {name: lk["walls"][str(k)][name] for name in models}
            for name, fn in models.items():
                q = statistics.quantiles(walls[name], n=4) if len(walls[name]) > 1 else [walls[name][0]] * 3
                plain = fn(micro, k, link, 2, optimizer_s=opt)
                contended = fn(micro, k, link, 2, optimizer_s=opt, contention=cont)
                points.append(Point(lk["rate_mbit"], k, name, statistics.median(walls[name]), q[0], q[2], plain,
                                    contended))  # fmt: skip
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
    from lab_utils.overlap import Bucket, MicroStep

    buckets = [Bucket(b.ready_s * factor, b.nbytes, b.op) for b in micro.buckets]
    return MicroStep(micro.forward_s * factor, micro.backward_s * factor, buckets)


def table(result: Result) -> str:
    """The validation as text: links, points and savings, and the 10 % verdict per model."""
    lines = [f"real link (veth + tc tbf), {result.machine}; measured {result.when}",
             f"load (/proc/loadavg) before: {result.load_before}; after: {result.load_after}",
             f"micro-step: forward {1e3 * result.micro['forward_s']:.1f} ms, backward "
             f"{1e3 * result.micro['backward_s']:.1f} ms, {result.micro['buckets']} buckets, "
             f"{result.micro['grad_bytes'] / 2**20:.2f} MiB of gradients", "",
             f"{'tbf Mbit/s':>10}{'calibrated Mbit/s':>19}{'latency us':>12}{'contention compute':>20}{'comm':>7}"
             f"{'compute now / stamped':>23}"]  # fmt: skip
    for lk in result.links:
        lines.append(f"{lk['rate_mbit']:>10.0f}{8 * lk['beta_Bps'] / 1e6:>19.0f}{1e6 * lk['alpha_s']:>12.0f}"
                     f"{100 * lk['contention'][0]:>19.0f}%{100 * lk['contention'][1]:>6.0f}%"
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
    for label, attr in (("model", "error"), ("model + contention", "contended_error")):
        errs = [abs(getattr(p, attr)) for p in result.points]
        within = sum(e <= 0.10 for e in errs)
        lines.append(f"{label}: within 10 % at {within} of {len(errs)} points (worst {100 * max(errs):.0f} %)")
    return "\n".join(lines)


# -- the rank side (runs inside a namespace) -------------------------------------------------------
def _rank_main(work: str) -> None:
    import torch
    import torch.distributed as dist

    from lab_utils.topics.ddp import sweep, workload

    raw = json.loads(Path(work, "config.json").read_text())
    cfg = Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{_ADDR[0]}:{_PORT}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=cfg.timeout_s))  # fmt: skip
    setup = workload.Setup(width=cfg.width, depth=cfg.depth, micro_batch=cfg.micro_batch)
    loops = {"naive": _naive, "no_sync": _no_sync, "compute": _compute_only}
    loopback = sweep.measure({"naive": _naive}, ks=(8,), rounds=(), repeats=3, bucket_cap_mb=cfg.bucket_cap_mb,
                             setup=setup)  # fmt: skip
    loopback.pop("emulated")
    bwd = torch.tensor([statistics.median(s["backward_s"] for s in loopback["loopback"])], dtype=torch.float64)
    dist.all_reduce(bwd, op=dist.ReduceOp.MAX)
    grad_bytes = sum(n for _, n in loopback["loopback"][0]["buckets"])
    ddp = workload.wrap(workload.model(setup), cfg.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    kmax = max(cfg.ks)
    x, y = workload.dataset(kmax * 2 * setup.micro_batch, setup)
    mbs = workload.micro_batches(x, y, 0, k=kmax, rank=rank, world_size=2, micro_batch=setup.micro_batch)
    links = []
    for r in cfg.rounds:
        rate_Bps = grad_bytes / (r * bwd.item())  # a 2-rank ring moves each byte once per rank
        _shape(os.environ["GLOO_SOCKET_IFNAME"], rate_Bps)
        dist.barrier()
        alpha, beta, bulk_s = _calibrate(grad_bytes)
        contention = _contention(ddp.module, mbs[0], grad_bytes, bulk_s)
        _naive(ddp, opt, mbs[:1])  # warm-up on this link
        walls: dict[str, dict[str, list[float]]] = {}
        for k in cfg.ks:
            walls[str(k)] = {name: [] for name in loops}
            for _ in range(cfg.repeats):
                for name, update in loops.items():  # alternating, so a slow spell hits both loops
                    dist.barrier()
                    t0 = time.perf_counter()
                    update(ddp, opt, mbs[:k])
                    walls[str(k)][name].append(time.perf_counter() - t0)
        links.append({"rate_mbit": 8 * rate_Bps / 1e6, "alpha_s": alpha, "beta_Bps": beta, "bulk_s": bulk_s,
                      "contention": contention, "walls": walls})  # fmt: skip
    Path(work, f"rank{rank}.json").write_text(json.dumps({"loopback": loopback, "links": links}))
    del ddp, opt
    dist.barrier()
    dist.destroy_process_group()


def _shape(iface: str, rate_Bps: float) -> None:
    """Limit this namespace's end of the veth to ``rate_Bps`` (tbf; a burst of about 1 ms)."""
    burst = max(16384, int(rate_Bps * 1e-3))
    cmd = ["tc", "qdisc", "replace", "dev", iface, "root", "tbf", "rate", f"{int(8 * rate_Bps)}bit",
           "burst", str(burst), "latency", "2s"]  # fmt: skip
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if got.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {got.stderr.strip()}")


def _timed_allreduce(t) -> float:
    import torch.distributed as dist

    t0 = time.perf_counter()
    dist.all_reduce(t)
    return time.perf_counter() - t0


def _calibrate(nbytes: int, tiny_reps: int = 21, bulk_reps: int = 5) -> tuple[float, float, float]:
    """Latency and bandwidth of this link for the ring model, from a tiny and a bulk all-reduce:
    tiny = 2 (p-1) alpha, bulk - tiny = 2 (p-1)/p n / beta (p = 2)."""
    import torch
    import torch.distributed as dist

    tiny, bulk = torch.zeros(1), torch.zeros(nbytes // 4)
    for _ in range(3):
        _timed_allreduce(tiny)
    dist.barrier()
    t_tiny = statistics.median(_timed_allreduce(tiny) for _ in range(tiny_reps))
    _timed_allreduce(bulk)
    dist.barrier()
    t_bulk = statistics.median(_timed_allreduce(bulk) for _ in range(bulk_reps))
    return t_tiny / 2, nbytes / max(t_bulk - t_tiny, 1e-9), t_bulk


def _contention(module, batch, nbytes: int, bulk_s: float, reps: int = 7) -> list[float]:
    """[compute, comm] slowdowns: a forward + backward timed alone and while a bulk all-reduce
    runs in another thread (both ranks), and that all-reduce alone (``bulk_s``) and beside it."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    x, y = batch

    def compute() -> float:
        t0 = time.perf_counter()
        F.mse_loss(module(x), y).backward()
        return time.perf_counter() - t0

    compute()
    alone = statistics.median(compute() for _ in range(reps))
    n = torch.tensor([max(3.0, reps * alone / bulk_s)])
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    comm: list[float] = []
    buf = torch.zeros(nbytes // 4)
    dist.barrier()
    thread = threading.Thread(target=lambda: comm.extend(_timed_allreduce(buf) for _ in range(int(n.item()))))
    thread.start()
    beside = []
    while thread.is_alive():
        t = compute()
        if thread.is_alive():  # it ended with the transfers still running: fully contended
            beside.append(t)
    thread.join()
    module.zero_grad(set_to_none=True)
    slow_compute = statistics.median(beside) / alone - 1 if beside else 0.0
    return [max(0.0, slow_compute), max(0.0, statistics.median(comm[:-1] or comm) / bulk_s - 1)]


def _compute_only(ddp, opt, micro_batches) -> None:
    """The same compute with no communication at all: the machine's speed at that moment."""
    import torch.nn.functional as F

    opt.zero_grad()
    with ddp.no_sync():
        for x, y in micro_batches:
            (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    opt.step()


def _naive(ddp, opt, micro_batches) -> None:
    import torch.nn.functional as F

    opt.zero_grad()
    for x, y in micro_batches:
        (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    opt.step()


def _no_sync(ddp, opt, micro_batches) -> None:
    import torch.nn.functional as F

    opt.zero_grad()
    for x, y in micro_batches[:-1]:
        with ddp.no_sync():
            (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    x, y = micro_batches[-1]
    (F.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    opt.step()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the result as JSON here (the lab reads lab_utils/topics/ddp/real_link.json)")
    ap.add_argument("--quick", action="store_true", help="K = 1, 2 and 3 repeats (a test of the machinery)")
    ap.add_argument("--rank-in", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank_in:
        _rank_main(args.rank_in)
        return 0
    config = Config(ks=(1, 2), repeats=3, micro_batch=256) if args.quick else Config()
    result = run(config)
    if args.out:
        Path(args.out).write_text(result.to_json())
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
