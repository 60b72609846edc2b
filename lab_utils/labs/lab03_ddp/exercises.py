"""Graders of lab 3's exercises; each runs the student's code on real ranks.

    from lab_utils.labs.lab03_ddp import exercises
    exercises.check_accumulate(train_accumulating)   # ○ not attempted / ✓ / ✗ with a hint
    exercises.check_mean_loss(mean_loss)
    exercises.check_fp16_hook(fp16_hook)
    exercises.check_buckets(n_allreduces)      # a prediction, compared with a measured run
    exercises.check_script(ddp_script)         # the student's own DDP script, under torchrun

Every grader computes its own reference (one process, one large batch) and measures the
student's code with instruments attached from outside (a counting comm hook, counted
``torch.distributed`` calls).

The last exercise is a whole script: ``write_script`` turns the student's function into a
standalone file (imports, the ``*_SCRIPT``/``script_*`` names below, and a ``__main__`` that calls
it with the checkpoint path from ``sys.argv``), and ``check_script`` runs it with ``torchrun``. The
file first installs this module's probe, which records from outside what the script does on each
rank: DDP's all-reduces (a counting comm hook added to every DDP model), the optimizer steps (a
global step hook), the index order of every pass over a ``DistributedSampler`` and the ranks that call
``torch.save``. The grade: the script exits cleanly, each epoch visits a new order, one all-reduce per
optimizer step, rank 0 alone saves, and its checkpoint (``model.module.state_dict()``, loaded with
strict keys) holds the parameters of one process training on the same large batches.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lab_utils.checks import fingerprint, grader, max_abs_diff
from lab_utils.env import dist_info
from lab_utils.flat import flat
from lab_utils.labs.lab03_ddp.buckets import counts, predict
from lab_utils.labs.lab03_ddp.workload import (
    Setup,
    UpdateRun,
    dataset,
    hooked_steps,
    large_batch_reference,
    model,
    param_bytes,
    train,
    wrap,
)
from lab_utils.launcher import launch
from lab_utils.launcher.errors import LaunchTimeout
from lab_utils.launcher.proctree import kill_tree

__all__ = ["check_accumulate", "check_mean_loss", "check_fp16_hook", "check_buckets", "check_script",
           "BUCKET_CAP_MB", "HANG_TIMEOUT", "K_SCRIPT", "EPOCHS", "MICRO_BATCH", "LR", "script_model",
           "script_data", "write_script", "ScriptRun", "judge"]  # fmt: skip

WORLD, K, UPDATES = 2, 3, 2
"""Ranks of every exercise but ddp-hang (ddp-script's torchrun included); ddp-accumulate's k and updates.
k is 3, not the notebook's K = 4, so a loop that reads the global K instead of its argument k shows."""
MEAN_WORLD = 3
"""ddp-hang runs on 3 ranks, so a mean hard-coded for 2 (``total / 2``) shows."""
SETUP = Setup(micro_batch=8)
BUCKET_CAP_MB = 0.001
"""The ``bucket_cap_mb`` of ddp-buckets (1,048 bytes). The lab's model has 1.04 MiB of gradients; at
this cap the count in backward order (6), in registration order (7), by division (1038) and with a
bucket per gradient (12) all differ, and none is a count the lab prints for its own caps (1, 2, 5)."""
HANG_TIMEOUT = 20.0
"""Seconds ``check_mean_loss`` waits before calling a run hung (start-up takes a few seconds)."""


def _train_stream(accumulate: Callable[..., None]) -> UpdateRun:
    """The student's loop gets all of this rank's micro-batches at once (K x UPDATES of them)."""
    return train(lambda d, o, m: accumulate(d, o, m, K), K * UPDATES, updates=1, setup=SETUP)


@grader(
    "ddp-accumulate",
    "accumulate with no_sync",
    hint="reread section 1: which part of a micro-step decides whether its backward all-reduces, which "
    "micro-step of a group is the one that does, and how must each loss be scaled for K micro-batches?",
)
def check_accumulate(accumulate: Callable[..., None]) -> str:
    got = launch(_train_stream, WORLD, args=(accumulate,), timeout=120)
    (count,) = got[0].collectives_per_update
    assert count == UPDATES, (
        f"{K * UPDATES} micro-steps with k={K} and one gradient bucket: measured {count} all-reduces, "
        f"expected {UPDATES} (one per optimizer step)"
    )
    assert len({r.fingerprint for r in got}) == 1, (
        "the ranks ended with different parameters: the backward that all-reduces must be the last one "
        "before each optimizer.step() (the last micro-step of each group of k, outside no_sync)"
    )
    ref = large_batch_reference(K, WORLD, updates=UPDATES, setup=SETUP)
    gap = max_abs_diff(got[0].params, ref)
    if gap >= 1e-5:
        mistake = next((why for why, wrong in _plausible_mistakes().items()
                        if max_abs_diff(got[0].params, wrong) < 1e-5), "")  # fmt: skip
        raise AssertionError(
            f"after {UPDATES} optimizer steps the parameters are {gap:.1e} away from {UPDATES} large batches" + mistake
        )
    return f"{UPDATES} all-reduces for {K * UPDATES} micro-steps, large-batch parameters (max diff {gap:.0e})"


def _plausible_mistakes() -> dict[str, torch.Tensor]:
    """The parameters that two likely mistakes reach, computed in one process (same samples)."""
    ref = functools.partial(large_batch_reference, K, WORLD, updates=UPDATES, setup=SETUP)
    no_zero_grad = (
        "; they match the loop with no zero_grad after each step (the previous step's gradients were "
        "added in): call optimizer.zero_grad() after optimizer.step()"
    )
    unscaled = "; they match a loop whose losses are not divided by k (each step's gradient is k times too large)"
    return {no_zero_grad: ref(zero_grad=False), unscaled: ref(loss_scale=float(K))}


def _mean_loss_on_rank(mean_loss: Callable[[float], Any]) -> Any:
    out = mean_loss(1.0 + 2.5 * dist_info().rank)
    return out.item() if isinstance(out, torch.Tensor) and out.numel() == 1 else out  # a tensor is fine too


@grader(
    "ddp-hang",
    "every rank reaches the collective",
    hint="reread section 4's demonstration: a collective returns only when every rank has called it; "
    "which lines must every rank run, and which only rank 0?",
)
def check_mean_loss(mean_loss: Callable[[float], Any]) -> str:
    for timeout in (HANG_TIMEOUT, 4 * HANG_TIMEOUT):  # a busy machine can take longer to start 3 ranks
        try:
            got = launch(_mean_loss_on_rank, MEAN_WORLD, args=(mean_loss,), timeout=timeout)
            break
        except LaunchTimeout as err:
            if "had returned" in str(err):  # some ranks returned, others wait in a collective: the hang
                raise AssertionError(f"after {timeout:g} s {str(err).split('. ')[0]}: it still hangs") from None
    else:
        raise AssertionError(f"no rank returned within {4 * HANG_TIMEOUT:g} s: it hangs, or the machine is too busy")
    losses = [1.0 + 2.5 * r for r in range(MEAN_WORLD)]
    want = sum(losses) / MEAN_WORLD
    value = got[0]
    if isinstance(value, (int, float)) and abs(value - want) >= 1e-6:
        if abs(value - sum(losses)) < 1e-6:
            raise AssertionError(f"on {MEAN_WORLD} ranks rank 0 returned {value:g}, the SUM of the losses "
                                 f"{losses}: all_reduce sums; the mean divides by dist.get_world_size()")  # fmt: skip
        if any(abs(value - sum(losses) / n) < 1e-6 for n in range(1, 9) if n != MEAN_WORLD):
            raise AssertionError(f"on {MEAN_WORLD} ranks rank 0 returned {value:g} = the sum / a fixed number; "
                                 f"divide by dist.get_world_size() (the mean is {want:g})")  # fmt: skip
    assert isinstance(value, (int, float)) and abs(value - want) < 1e-6, (
        f"rank 0 returned {value!r}; the mean of the ranks' losses {losses} is {want:g}"
    )
    others = got[1:]
    assert all(v is None or (isinstance(v, (int, float)) and abs(v - want) < 1e-6) for v in others), (
        f"the other ranks returned {others!r}: return None (only rank 0 reports) or the same mean"
    )
    return f"no hang, rank 0 reports the mean {want:g}"


def _train_with_hook(hook: Callable[..., Any]) -> dict[str, Any]:
    """One micro-batch per update, the student's comm hook on DDP, its collectives counted."""
    ddp = wrap(model(SETUP), bucket_cap_mb=25)
    returned: set[str] = set()

    def recorded(state, bucket):  # the student's hook, and the dtype its future holds (DDP reads annotations)
        fut = hook(state, bucket)
        if not isinstance(fut, torch._C.Future):  # what get_future() and then() return
            return fut  # DDP itself says what is wrong

        def note(f: torch.futures.Future) -> Any:
            v = f.value()
            t = v[0] if isinstance(v, (list, tuple)) and v else v
            returned.add(str(t.dtype).removeprefix("torch.") if isinstance(t, torch.Tensor) else type(t).__name__)
            return v

        return fut.then(note)

    ddp.register_comm_hook(None, recorded)
    counter = hooked_steps(ddp, UPDATES, SETUP)
    out = {
        "returned": sorted(returned),
        "events": [(e.op, e.dtype, e.nbytes) for e in counter.events],
        "bytes_per_update": [p["bytes"] for p in counter.summary()["per_step"]],
        "param_bytes": sum(param_bytes(ddp.module)),
        "params": flat(ddp.module, dtype=torch.float64),
        "fingerprint": fingerprint(ddp.module),
    }
    del ddp
    return out


@grader(
    "ddp-fp16-hook",
    "a comm hook that sends float16",
    hint="reread the introduction of the float16 hook exercise: what must the future's value hold, in which dtype, "
    "and is the all-reduce a sum or a mean?",
)
def check_fp16_hook(fp16_hook: Callable[..., Any]) -> str:
    got = launch(_train_with_hook, WORLD, args=(fp16_hook,), timeout=120)
    events, full = got[0]["events"], got[0]["param_bytes"]
    assert events, "the hook made no collective: it must all-reduce the bucket (dist.all_reduce)"
    dtypes = sorted({d for _, d, _ in events})
    assert dtypes == ["float16"], f"the hook sent {dtypes}, not float16"
    assert got[0]["returned"] == ["float32"], (
        f"the future's value is {got[0]['returned']}: the exercise (like torch's fp16_compress_hook) hands DDP "
        "the average in the bucket's own dtype, float32: cast it back with .to(bucket.buffer().dtype)"
    )
    sent = got[0]["bytes_per_update"]
    assert sent == [full // 2] * UPDATES, f"sent {sent} bytes per update; the float32 gradients are {full} bytes"
    assert len({r["fingerprint"] for r in got}) == 1, "the ranks ended with different parameters"
    ref = large_batch_reference(1, WORLD, updates=UPDATES, setup=SETUP)
    gap = max_abs_diff(got[0]["params"], ref)
    assert gap < 2e-4, f"the parameters are {gap:.1e} away from one large batch: is the sum divided by the world size?"
    return f"{full // 2:,} bytes per update instead of {full:,}, large-batch parameters within {gap:.0e}"


@grader(
    "ddp-buckets",
    "predict the buckets",
    hint="reread 'Gradient buckets' in section 2: in which order do the gradients become ready, and "
    "when exactly is a bucket closed?",
)
def check_buckets(n_allreduces: int) -> str:
    guess = _whole(n_allreduces)
    got = launch(counts, WORLD, kwargs=dict(caps=(BUCKET_CAP_MB,), steps=2), timeout=120)[0]
    first, after = got.per_step[str(BUCKET_CAP_MB)]
    cap = int(BUCKET_CAP_MB * 2**20)
    if guess != after:
        sizes = got.param_bytes
        if guess == len(predict(sizes, cap)):
            why = ("; that is the greedy packing in REGISTRATION order: gradients become ready in backward "
                   "order, last layer first (the list reversed)")  # fmt: skip
        elif guess == len(sizes):
            why = ("; that is one bucket per gradient: a bucket closes once it holds at least the cap, so a "
                   "small bias joins the next gradient's bucket")  # fmt: skip
        elif guess == after - 1:
            first_bucket = predict(list(reversed(sizes)), cap)[0]  # backward order
            why = (f"; one fewer: each bucket closes as soon as it holds {cap:,} bytes or more, so the first "
                   f"gradients to become ready already fill one ({first_bucket:,} bytes)")  # fmt: skip
        elif guess == _never_over(list(reversed(sizes)), cap):
            why = ("; that is a rule that never lets a bucket exceed the cap: DDP closes a bucket once it holds "
                   "AT LEAST the cap, so the gradient that crosses it stays in the bucket")  # fmt: skip
        elif guess == first:
            why = (
                "; that is the first backward's count: the question is after the rebuild (from the second backward on)"
            )
        elif guess == -(-sum(sizes) // cap):
            why = ("; that is the bytes divided by the cap: a gradient is never split, and a bucket closes "
                   "only once it holds at least the cap")  # fmt: skip
        else:
            why = ""
        raise AssertionError(f"you predicted {guess}; the run measured a different count{why}")
    sizes = got.bucket_bytes[str(BUCKET_CAP_MB)][-1]
    return f"measured {after} all-reduces per backward after the rebuild ({first} before it), buckets {sizes} bytes"


def _never_over(sizes: list[int], cap: int) -> int:
    """Buckets if none may exceed ``cap`` (a gradient that would cross it opens the next one): a wrong rule."""
    n, current = 0, 0
    for size in sizes:
        if current and current + size > cap:
            n, current = n + 1, 0
        current += size
    return n + (current > 0)


def _whole(answer: Any) -> int:
    """A count given as 5, 5.0 or "5"."""
    try:
        if float(answer).is_integer():
            return int(float(answer))
    except (TypeError, ValueError):
        pass
    raise AssertionError(f"n_allreduces should be a whole number of all-reduces, got {answer!r}")


# -- ddp-script: the student's own DDP script under torchrun --------------------------------------

K_SCRIPT = 2
"""Micro-batches per optimizer step in the exercise's script."""
EPOCHS = 2
MICRO_BATCH = 8
UPDATES_PER_EPOCH = 2
_SCRIPT_SETUP = Setup(width=64, depth=2, micro_batch=MICRO_BATCH)
LR = _SCRIPT_SETUP.lr
_SCRIPT_SAMPLES = WORLD * K_SCRIPT * MICRO_BATCH * UPDATES_PER_EPOCH
_PROBE_ENV = "LAB_UTILS_SCRIPT_PROBE"
SCRIPT_TIMEOUT_S = 180.0


def script_model() -> torch.nn.Module:
    """The exercise's model (an MLP small enough for one gradient bucket), seeded."""
    return model(_SCRIPT_SETUP)


def script_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The exercise's whole dataset ``(x, y)``: every rank builds the same one."""
    return dataset(_SCRIPT_SAMPLES, _SCRIPT_SETUP)


_HEADER = '''\
"""Written by lab_utils.labs.lab03_ddp.exercises from the notebook's function. Run it with:
    torchrun --standalone --nproc_per_node=2 {name} CHECKPOINT_PATH
"""
import atexit
import os
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from lab_utils.labs.lab03_ddp import exercises as _grader
from lab_utils.labs.lab03_ddp.exercises import EPOCHS, K_SCRIPT, LR, MICRO_BATCH, script_data, script_model

_grader.install_probe()  # counts all-reduces, optimizer steps and sampler orders (only under the check)

'''


def write_script(fn: Callable[[str], Any], path: str | os.PathLike) -> Path:
    """``fn``'s source as a standalone torchrun script at ``path`` (returned)."""
    if not callable(fn):
        raise TypeError(f"write_script needs the function you wrote, got {fn!r}")
    path = Path(path)
    try:
        body = textwrap.dedent(inspect.getsource(fn))
    except OSError:  # no source file (code made by exec): carry the function by value instead
        import cloudpickle

        body = f"import cloudpickle\n\n{fn.__name__} = cloudpickle.loads({cloudpickle.dumps(fn)!r})\n"
    footer = (f'\n\nif __name__ == "__main__":\n    {fn.__name__}(sys.argv[1])\n'
              "    # Finished: leave now. gloo can abort in the interpreter's teardown when a DDP object\n"
              "    # outlives its process group (SIGABRT, 'terminate called ...'): not this script's fault.\n"
              "    atexit._run_exitfuncs()  # the check's record of this rank\n"
              "    sys.stdout.flush()\n"
              "    sys.stderr.flush()\n"
              "    os._exit(0)\n")  # fmt: skip
    path.write_text(_HEADER.format(name=path.name) + body + footer)
    return path


def install_probe() -> None:
    """In a script under the check: record DDP's all-reduces, optimizer steps, sampler orders and
    ``torch.save`` calls, and write them at exit. Does nothing when the script runs on its own."""
    out = os.environ.get(_PROBE_ENV)
    if not out:
        return
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DistributedSampler

    rank = os.environ.get("RANK", "0")
    record: dict[str, Any] = {"rank": int(rank), "all_reduces": 0, "steps": 0, "orders": [], "saves": 0}

    def counting(state: dict, bucket):
        state["all_reduces"] += 1
        return allreduce_hook(None, bucket)

    init, passes = DDP.__init__, DistributedSampler.__iter__

    def ddp_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register_comm_hook(record, counting)

    def sampler_iter(self):
        order = list(passes(self))
        record["orders"].append(order)
        return iter(order)

    save = torch.save

    def counted_save(*args, **kwargs):  # which ranks write a checkpoint
        record["saves"] += 1
        return save(*args, **kwargs)

    DDP.__init__, DistributedSampler.__iter__, torch.save = ddp_init, sampler_iter, counted_save
    register_optimizer_step_post_hook(lambda *_: record.__setitem__("steps", record["steps"] + 1))
    atexit.register(lambda: Path(out, f"rank{rank}.json").write_text(json.dumps(record)))


@dataclass
class ScriptRun:
    """What a torchrun of the student's script left: exit code, the end of its output, each
    rank's probe record, rank 0's checkpoint as flat parameters (None if there is none, or if it does
    not load into ``script_model()`` with strict keys) and the checkpoint's keys."""

    returncode: int
    output_tail: str
    ranks: list[dict] = field(default_factory=list)
    params: torch.Tensor | None = None
    checkpoint_keys: list[str] | None = None


def run_script(fn: Callable[[str], Any]) -> ScriptRun:
    """Write ``fn`` to a script and run it with torchrun on ``WORLD`` processes (gloo on CPU)."""
    with tempfile.TemporaryDirectory(prefix="ddp-script-") as work:
        script, ckpt = write_script(fn, Path(work, "my_ddp_script.py")), Path(work, "checkpoint.pt")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
               str(script), str(ckpt)]  # fmt: skip
        env = dict(os.environ, OMP_NUM_THREADS="1", **{_PROBE_ENV: work})
        env["PYTHONPATH"] = os.pathsep.join([p or os.getcwd() for p in sys.path])
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: as every other torchrun the labs start
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, stdin=subprocess.DEVNULL)  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)  # torchrun's ranks live in sessions of their own
            output, _ = proc.communicate()
            output += (
                f"\n(stopped after {SCRIPT_TIMEOUT_S:g} s: a rank that waits in a collective the other skips hangs)"
            )
        ranks = [json.loads(p.read_text()) for p in sorted(Path(work).glob("rank*.json"))]
        params, keys = None, None
        if ckpt.exists():
            state = torch.load(ckpt, map_location="cpu")
            keys = [str(k) for k in state] if isinstance(state, dict) else [type(state).__name__]
            net = script_model()
            try:
                net.load_state_dict(state)  # strict: model.state_dict() of the DDP wrapper has "module." keys
                params = flat(net, dtype=torch.float64)
            except (RuntimeError, TypeError, AttributeError):
                pass
    lines = output.strip().splitlines()
    errors = [line for line in lines if re.match(r"\s*(\[rank\d+\]:\s*)?\w+(Error|Exception): ", line)]
    return ScriptRun(proc.returncode, "\n".join(errors[-2:] or lines[-6:]), ranks, params, keys)


def script_reference() -> torch.Tensor:
    """One process, no DDP: the same large batches (both ranks' K micro-batches per step, in
    the orders DistributedSampler gives each rank at each epoch)."""
    from torch.utils.data import DistributedSampler, TensorDataset

    x, y = script_data()
    data = TensorDataset(x, y)
    net = script_model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for epoch in range(EPOCHS):
        orders = []
        for rank in range(WORLD):
            sampler = DistributedSampler(data, num_replicas=WORLD, rank=rank, shuffle=True, seed=0)
            sampler.set_epoch(epoch)
            orders.append(list(sampler))
        for u in range(UPDATES_PER_EPOCH):
            span = slice(u * K_SCRIPT * MICRO_BATCH, (u + 1) * K_SCRIPT * MICRO_BATCH)
            idx = [i for order in orders for i in order[span]]
            opt.zero_grad()
            F.mse_loss(net(x[idx]), y[idx]).backward()
            opt.step()
    return flat(net, dtype=torch.float64)


def judge(run: ScriptRun) -> str:
    """Assert what a correct script does; returns the ✓ detail."""
    if run.returncode != 0:
        if "NotImplementedError" in run.output_tail:
            raise NotImplementedError
        helper = ("\nthe check copies only this function, under the script's imports: define any helper inside it"
                  if "NameError" in run.output_tail else "")  # fmt: skip
        raise AssertionError(
            f"torchrun exited with {run.returncode}; the end of its output:\n{run.output_tail}{helper}"
        )
    assert len(run.ranks) == WORLD, f"{len(run.ranks)} ranks reported, expected {WORLD}: call init_process_group"
    steps = EPOCHS * UPDATES_PER_EPOCH
    for rank, rec in enumerate(run.ranks):
        orders = rec["orders"]
        assert len(orders) == EPOCHS, (
            f"rank {rank} made {len(orders)} passes over a DistributedSampler in {EPOCHS} epochs: give the "
            f"DataLoader sampler=DistributedSampler(dataset, shuffle=True, seed=0) and loop over it once per epoch"
        )
        assert len({tuple(o) for o in orders}) == EPOCHS, (
            f"rank {rank} saw the same sample order in every epoch: call sampler.set_epoch(epoch) before each epoch"
        )
        assert rec["steps"] == steps, (
            f"rank {rank} took {rec['steps']} optimizer steps; expected {steps} (one per K_SCRIPT={K_SCRIPT} "
            f"micro-batches, {UPDATES_PER_EPOCH} per epoch)"
        )
        assert rec["all_reduces"] == steps, (
            f"rank {rank}: {rec['all_reduces']} all-reduces for {steps} optimizer steps; the first K_SCRIPT - 1 "
            f"micro-steps (forward AND backward) go inside model.no_sync()"
        )
    savers = [rec.get("rank", i) for i, rec in enumerate(run.ranks) if rec["saves"]]
    assert savers == [0] or not savers, (
        f"ranks {savers} called torch.save: only rank 0 writes the checkpoint (if dist.get_rank() == 0:), or "
        f"the ranks write one file at once"
    )
    assert run.checkpoint_keys is not None, (
        "rank 0 saved no checkpoint: torch.save(model.module.state_dict(), checkpoint_path)"
    )
    keys = run.checkpoint_keys
    assert not any(k.startswith("module.") for k in keys), (
        f"the checkpoint's keys start with 'module.' ({keys[0]!r}: the DDP wrapper's state_dict): save "
        f"model.module.state_dict(), which loads into the plain model"
    )
    assert run.params is not None, (
        f"rank 0's checkpoint (keys {keys[:3]}) does not load into script_model(): save model.module.state_dict()"
    )
    gap = max_abs_diff(run.params, script_reference())
    assert gap < 1e-5, (
        f"rank 0's checkpoint is {gap:.1e} away from one process on the same large batches: is each loss "
        f"divided by K_SCRIPT, and the gradient zeroed after each step?"
    )
    return (f"torchrun, {WORLD} ranks: a new order each epoch, {steps} all-reduces for {steps} steps, "
            f"the checkpoint equals one process (max diff {gap:.0e})")  # fmt: skip


@grader(
    "ddp-script",
    "your own DDP script under torchrun",
    hint="reread section 5: init_process_group, DDP(model), a DistributedSampler with set_epoch each "
    "epoch, no_sync around the first K_SCRIPT - 1 micro-steps, and a checkpoint saved by rank 0 only",
)
def check_script(ddp_script: Callable[[str], Any]) -> str:
    return judge(run_script(ddp_script))
