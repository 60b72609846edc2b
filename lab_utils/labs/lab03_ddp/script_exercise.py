"""Lab 3's last exercise: the student's own DDP script, started with ``torchrun`` and graded on
what its ranks did.

    from lab_utils.labs.lab03_ddp import script_exercise as ex
    def ddp_script(checkpoint_path): ...          # the student's script, as one function
    ex.check_script(ddp_script)                   # writes it to a file, runs torchrun, grades

``write_script`` turns the function into a standalone file (imports, the names below, and a
``__main__`` that calls it with the checkpoint path from ``sys.argv``). The file first installs
this module's probe, which records from outside what the script does on each rank: DDP's
all-reduces (a counting comm hook added to every DDP model), the optimizer steps (a global
step hook) and the index order of every pass over a ``DistributedSampler``. The grade: the
script exits cleanly, each epoch visits a new order, one all-reduce per optimizer step, and rank
0's checkpoint holds the parameters of one process training on the same large batches.
"""

from __future__ import annotations

import atexit
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

from lab_utils.checks import grader, max_abs_diff
from lab_utils.flat import flat
from lab_utils.labs.lab03_ddp.workload import Setup, dataset, model
from lab_utils.launcher.proctree import kill_tree

__all__ = ["K_SCRIPT", "EPOCHS", "MICRO_BATCH", "LR", "script_model", "script_data", "write_script",
           "ScriptRun", "judge", "check_script"]  # fmt: skip

WORLD = 2
K_SCRIPT = 2
"""Micro-batches per optimizer step in the exercise's script."""
EPOCHS = 2
MICRO_BATCH = 8
UPDATES_PER_EPOCH = 2
_SETUP = Setup(width=64, depth=2, micro_batch=MICRO_BATCH)
LR = _SETUP.lr
_SAMPLES = WORLD * K_SCRIPT * MICRO_BATCH * UPDATES_PER_EPOCH
_PROBE_ENV = "LAB_UTILS_SCRIPT_PROBE"
TIMEOUT_S = 180.0


def script_model() -> torch.nn.Module:
    """The exercise's model (an MLP small enough for one gradient bucket), seeded."""
    return model(_SETUP)


def script_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The exercise's whole dataset ``(x, y)``: every rank builds the same one."""
    return dataset(_SAMPLES, _SETUP)


_HEADER = '''\
"""Written by lab_utils.labs.lab03_ddp.script_exercise from the notebook's function. Run it with:
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

from lab_utils.labs.lab03_ddp import script_exercise as _grader
from lab_utils.labs.lab03_ddp.script_exercise import EPOCHS, K_SCRIPT, LR, MICRO_BATCH, script_data, script_model

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
    """In a script under the check: record DDP's all-reduces, optimizer steps and sampler orders,
    and write them at exit. Does nothing when the script runs on its own."""
    out = os.environ.get(_PROBE_ENV)
    if not out:
        return
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DistributedSampler

    record: dict[str, Any] = {"all_reduces": 0, "steps": 0, "orders": []}

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

    DDP.__init__, DistributedSampler.__iter__ = ddp_init, sampler_iter
    register_optimizer_step_post_hook(lambda *_: record.__setitem__("steps", record["steps"] + 1))
    rank = os.environ.get("RANK", "0")
    atexit.register(lambda: Path(out, f"rank{rank}.json").write_text(json.dumps(record)))


@dataclass
class ScriptRun:
    """What a torchrun of the student's script left: exit code, the end of its output, each
    rank's probe record, and rank 0's checkpoint as flat parameters (None if there is none)."""

    returncode: int
    output_tail: str
    ranks: list[dict] = field(default_factory=list)
    params: torch.Tensor | None = None


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
            output, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)  # torchrun's ranks live in sessions of their own
            output, _ = proc.communicate()
            output += f"\n(stopped after {TIMEOUT_S:g} s: a rank that waits in a collective the other skips hangs)"
        ranks = [json.loads(p.read_text()) for p in sorted(Path(work).glob("rank*.json"))]
        params = None
        if ckpt.exists():
            state = torch.load(ckpt, map_location="cpu")
            net = script_model()
            net.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
            params = flat(net, dtype=torch.float64)
    lines = output.strip().splitlines()
    errors = [line for line in lines if re.match(r"\s*(\[rank\d+\]:\s*)?\w+(Error|Exception): ", line)]
    return ScriptRun(proc.returncode, "\n".join(errors[-2:] or lines[-6:]), ranks, params)


def reference() -> torch.Tensor:
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
        raise AssertionError(f"torchrun exited with {run.returncode}; the end of its output:\n{run.output_tail}")
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
    assert run.params is not None, "rank 0 saved no checkpoint: torch.save(model.module.state_dict(), checkpoint_path)"
    gap = max_abs_diff(run.params, reference())
    assert gap < 1e-5, (
        f"rank 0's checkpoint is {gap:.1e} away from one process on the same large batches: is each loss "
        f"divided by K_SCRIPT, and the gradient zeroed after each step?"
    )
    return (f"torchrun, {WORLD} ranks: a new order each epoch, {steps} all-reduces for {steps} steps, "
            f"the checkpoint equals one process (max diff {gap:.0e})")  # fmt: skip


@grader(
    "Exercise 5 · your own DDP script under torchrun",
    hint="reread section 5: init_process_group, DDP(model), a DistributedSampler with set_epoch each "
    "epoch, no_sync around the first K_SCRIPT - 1 micro-steps, and a checkpoint saved by rank 0 only",
)
def check_script(ddp_script: Callable[[str], Any]) -> str:
    return judge(run_script(ddp_script))
