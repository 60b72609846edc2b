"""lab_utils.launch: real ranks, results in rank order, clear failures, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.distributed as dist

from lab_utils import launch
from lab_utils.launcher import max_world_size, resolve_backend
from lab_utils.launcher.errors import LaunchTimeout, RankDiedError, RankError
from lab_utils.launcher.examples import allreduce_demo, ddp_regression
from tests.helpers.ranks import cuda_count, rank_processes, wait_no_ranks

pytestmark = pytest.mark.usefixtures("no_orphans")


def rank_and_pid(offset):
    return {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "value": offset + dist.get_rank(),
    }


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_results_come_back_in_rank_order(world_size):
    out = launch(rank_and_pid, world_size, args=(100,))
    assert [r["rank"] for r in out] == list(range(world_size))
    assert all(r["world"] == world_size for r in out)
    assert [r["value"] for r in out] == [100 + r for r in range(world_size)]
    assert len({r["pid"] for r in out}) == world_size and os.getpid() not in {r["pid"] for r in out}
    assert out.backend == "gloo" and out.world_size == world_size


def test_threads_are_shared_out_between_ranks():
    out = launch(rank_and_pid, 2, args=(0,))
    assert all(r["threads"] == max(1, (os.cpu_count() or 1) // 2) for r in out)


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_real_all_reduce(world_size):
    out = launch(allreduce_demo, world_size, kwargs={"n": 3})
    assert all(r["sum"] == world_size * (world_size + 1) / 2 for r in out)


def test_ddp_keeps_ranks_in_step():
    a, b = launch(ddp_regression, 2)
    assert a["fingerprint"] == b["fingerprint"]  # same parameters on both ranks after DDP steps
    assert a["loss"] != b["loss"]  # ... although each rank saw different data


SCRIPT = textwrap.dedent("""
    # A function defined in __main__, in a script with no `if __name__ == "__main__"` guard:
    # the same situation as a function typed into a notebook cell.
    import json, torch, torch.distributed as dist
    from lab_utils import launch
    factor = 7
    def cell_fn(x):
        t = torch.tensor([float(dist.get_rank() + x)])
        dist.all_reduce(t)
        return factor * t.item()
    first = launch(cell_fn, 2, args=(1,))
    second = launch(cell_fn, 3, args=(0,))     # run after run in the same interpreter
    print(json.dumps([list(first), list(second)]))
""")


def test_function_defined_in_main_runs_twice():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, second = eval(proc.stdout.strip().splitlines()[-1])
    assert first == [7 * 3.0] * 2  # (0+1) + (1+1) = 3
    assert second == [7 * 3.0] * 3  # 0 + 1 + 2 = 3


def raise_on_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("bad batch shape on purpose")
    dist.barrier()


def test_a_raising_rank_is_named_with_its_traceback():
    with pytest.raises(RankError) as info:
        launch(raise_on_rank_one, 2, timeout=60)
    err = info.value
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert "bad batch shape on purpose" in str(err)
    assert "raise_on_rank_one" in err.remote_traceback


def hang_on_rank_zero():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins: it has returned
    return dist.get_rank()


def test_a_hang_becomes_a_timeout_naming_only_the_stuck_rank():
    t0 = time.perf_counter()
    stuck_only = r"ranks \[0\] did not finish within timeout=6 s \(ranks \[1\] had returned"
    with pytest.raises(LaunchTimeout, match=stuck_only):
        launch(hang_on_rank_zero, 2, timeout=6)  # start-up on a busy machine can take seconds
    assert time.perf_counter() - t0 < 20


def die_on_rank_one():
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_a_dead_rank_is_reported():
    with pytest.raises(RankDiedError) as info:
        launch(die_on_rank_one, 2, timeout=60)
    assert info.value.rank == 1 and "SIGKILL" in str(info.value)


def spawn_grandchild():
    # A rank that starts its own child (as a DataLoader worker would) and then hangs.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # lab_utils.launcher._rank child"])
    time.sleep(600)


def test_timeout_also_kills_what_a_rank_started():
    with pytest.raises(LaunchTimeout):
        launch(spawn_grandchild, 1, timeout=3)


INTERRUPTED = textwrap.dedent("""
    import signal, time
    # A kernel turns Ctrl-C into KeyboardInterrupt. Say so explicitly: a process started from a
    # script's background job inherits SIGINT *ignored*, and would then never see the signal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from lab_utils import launch
    def slow():
        time.sleep(600)
    print("start", flush=True)
    launch(slow, 2, timeout=600)
""")


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_interrupt_or_killed_caller_leaves_nothing(how):
    """Ctrl-C in a cell (SIGINT: KeyboardInterrupt) or a killed kernel (SIGKILL)."""
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "start"
        deadline = time.monotonic() + 30
        while len(rank_processes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(rank_processes()) == 2, "the ranks never started"
        proc.send_signal(getattr(signal, how))
        proc.wait(timeout=30)
        assert not wait_no_ranks(30)
    finally:
        proc.kill()  # never leave the caller behind, whatever failed above
        proc.wait()


@pytest.mark.parametrize(
    "world_size, match", [(0, "at least 1"), (-2, "at least 1"), (10_000, "more ranks than this machine")]
)
def test_bad_world_size(world_size, match):
    with pytest.raises(ValueError, match=match):
        launch(rank_and_pid, world_size, args=(0,))
    assert max_world_size() < 10_000


def test_world_size_must_be_an_int():
    with pytest.raises(TypeError, match="world_size must be an int"):
        launch(rank_and_pid, "2", args=(0,))


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend='mpi' is not one of"):
        launch(rank_and_pid, 2, backend="mpi", args=(0,))


@pytest.mark.skipif(cuda_count() > 0, reason="checks the no-GPU error")
def test_nccl_without_gpus_says_what_to_do():
    with pytest.raises(ValueError, match="needs CUDA GPUs and none is visible.*gloo"):
        launch(rank_and_pid, 2, backend="nccl", args=(0,))
    assert resolve_backend("auto", 2) == "gloo"


def test_an_argument_that_cannot_travel_is_named():
    with pytest.raises(TypeError, match=r"args\[1\] cannot be sent to a worker"):
        launch(rank_and_pid, 2, args=(0, threading.Lock()))
    with pytest.raises(TypeError, match=r"kwargs\['lock'\] cannot be sent"):
        launch(rank_and_pid, 2, kwargs={"lock": threading.Lock()})


def test_not_callable_and_bad_timeout():
    with pytest.raises(TypeError, match="fn must be callable"):
        launch(42, 2)
    with pytest.raises(ValueError, match="timeout"):
        launch(rank_and_pid, 2, args=(0,), timeout=0)


def return_unpicklable():
    return threading.Lock()


def test_a_result_that_cannot_come_back():
    with pytest.raises(RankError, match="cannot be pickled"):
        launch(return_unpicklable, 1)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_count() < 1, reason="needs CUDA")
def test_nccl_on_gpus():
    n = min(cuda_count(), 2)
    out = launch(allreduce_demo, n, backend="nccl", kwargs={"n": 8})
    assert out.backend == "nccl"
    assert all(r["sum"] == n * (n + 1) / 2 and r["backend"] == "nccl" for r in out)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_count() < 1, reason="needs CUDA")
def test_auto_falls_back_to_gloo_with_fewer_gpus_than_ranks():
    world = cuda_count() + 1
    if world > max_world_size():
        pytest.skip("too many GPUs to oversubscribe")
    assert resolve_backend("auto", world) == "gloo"
    with pytest.raises(ValueError, match="one CUDA GPU per rank"):
        resolve_backend("nccl", world)


def parent_pid() -> int:
    return os.getppid()


def test_warm_start_forks_ranks_from_one_process_and_reuses_it():
    first = launch(parent_pid, 2)
    second = launch(parent_pid, 3)
    parents = set(first) | set(second)
    assert len(parents) == 1 and os.getpid() not in parents, "ranks come from one warm process, reused"
    with open(f"/proc/{parents.pop()}/cmdline", "rb") as f:
        assert b"lab_utils/launcher/_zygote.py" in f.read()


def loaded(names: tuple[str, ...]) -> list[bool]:
    return [name in sys.modules for name in names]


def test_warm_ranks_start_with_the_heavy_imports_done():
    """DDP's constructor and an optimizer's first step import torch._dynamo (2-4 s of CPU per rank
    on two cores); the warm process imports it, and what the caller has of transformers, once."""
    import transformers  # noqa: F401 - the caller has it, so its ranks get it

    assert launch(loaded, 2, args=(("torch._dynamo", "transformers"),)) == [[True, True]] * 2


def test_warm_start_off_starts_fresh_interpreters(monkeypatch):
    monkeypatch.setenv("LAB_UTILS_WARM_START", "0")
    assert launch(parent_pid, 2) == [os.getpid()] * 2  # each rank is a child of the caller
