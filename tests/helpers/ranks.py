"""Test helpers for real processes: the session marker every process we start inherits, the
process-table scan for ranks left behind, and torchrun agents (one node, two nodes on localhost)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid

import pytest

from lab_utils.launcher.proctree import descendants

# Every process this test session starts (ranks, torchrun agents, helper scripts) inherits this
# marker, so the orphan check sees our processes only, even beside other jobs on the machine,
# and still sees an orphan that was re-parented to init.
SESSION_MARK = f"LAB_UTILS_TEST_SESSION={uuid.uuid4().hex}"
os.environ["LAB_UTILS_TEST_SESSION"] = SESSION_MARK.split("=", 1)[1]


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rank_processes() -> list[tuple[int, str]]:
    """(pid, command line) of every live rank process (lab_utils.launch or lab_utils.launcher.torchrun) that
    this test session started."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = _cmdline(pid)
            with open(f"/proc/{pid}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{pid}/environ", "rb") as f:
                ours = SESSION_MARK.encode() in f.read().split(b"\0")
        except OSError:
            continue
        if not ours or state == "Z":
            continue
        # A warm-start process lives as long as the process that started it (a kernel, a
        # script, this session) and is no rank; the ranks it forks are, and so is a warm
        # process whose starter is gone (re-parented to init).
        warm = "lab_utils/launcher/_zygote.py" in cmd
        forked_rank = warm and "lab_utils/launcher/_zygote.py" in _cmdline(ppid)
        if (
            "lab_utils/launcher/_rank.py" in cmd
            or "lab_utils.launcher.torchrun" in cmd
            or forked_rank
            or (warm and ppid == "1")
        ):
            found.append((int(pid), cmd))
    return found


def wait_no_ranks(timeout: float = 10.0) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while (left := rank_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill(found: list[tuple[int, str]]) -> None:
    for pid, _ in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _stop_agent(agent, grace: float = 5.0) -> None:
    """Stop a torchrun agent and everything it started: SIGTERM first (torchrun then stops its
    workers), SIGKILL after ``grace`` seconds to the agent and to each worker's process group (torchrun
    starts every worker in a session of its own, so killing the agent's group would miss them)."""
    if agent.poll() is not None:
        return
    below = descendants(agent.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(agent.pid, signal.SIGTERM)
    with contextlib.suppress(Exception):
        agent.wait(timeout=grace)
    for pid in [agent.pid, *below]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    agent.wait()


# What a torch worker prints when a gloo thread, freeing a finished collective while Python shuts
# down, cannot take the GIL (std::terminate, SIGABRT); the surviving agent then waits in its exit barrier.
GLOO_EXIT_ABORT = "terminate called without an active exception"


def static_rendezvous(addr: str, port: int | str) -> list[str]:
    """torchrun's flags for a fixed set of machines: node 0 at ``addr`` hosts the store on ``port``.
    torchrun_two_agents runs these; the docs' two-machine commands must show them (tests check)."""
    return ["--rdzv_backend=static", f"--master_addr={addr}", f"--master_port={port}"]


def torchrun_two_agents(
    function: str,
    tmp_path,
    *,
    kwargs: str | None = None,
    timeout: float = 120,
    grace: float = 15,
    script_args: tuple[str, ...] = (),
) -> dict:
    """Run ``function`` under two torchrun agents (--nnodes=2, one process each) on localhost,
    standing in for two machines; return the JSON that global rank 0 wrote (it alone writes).
    A ``function`` ending in ``.py`` is a script run with ``script_args`` (and ``--out FILE``)
    instead of ``lab_utils.launcher.torchrun module:function``.

    Static rendezvous, the form the README documents for two machines: node 0 hosts the store at
    --master_addr:--master_port and holds global rank 0. (c10d on one host lets either agent host
    the store, and the other's rendezvous shutdown then talks to a store that may be gone.) Each
    agent's output goes to a file, never a pipe, so no agent can block on a full pipe while the other
    is waited for. Once one agent has exited, the other gets ``grace`` seconds; past those, or past
    ``timeout``, both agents and their workers are stopped and the failure shows both agents' output."""
    import json
    import subprocess
    import sys

    from lab_utils.launcher import free_port

    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    common = (
        ["--nnodes=2", "--nproc_per_node=1", *static_rendezvous("127.0.0.1", free_port())]
        + (
            [str(function), *script_args]
            if str(function).endswith(".py")
            else ["-m", "lab_utils.launcher.torchrun", function]
        )
        + (["--kwargs", kwargs] if kwargs else [])
        + ["--out"]
    )
    logs = [tmp_path / f"agent{n}.log" for n in (0, 1)]
    agents = []
    try:
        for n in (0, 1):
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--node_rank={n}", *common, tmp_path / f"n{n}.json"]
            with open(logs[n], "w") as log:  # the agent holds its own copy of the descriptor
                agent = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            agents.append(agent)
        # Both agents leave torchrun's exit barrier together, so once one has exited the other follows
        # within a second or two; it gets `grace` seconds, not its barrier's 300.
        deadline, first_exit = time.monotonic() + timeout, None
        while any(a.poll() is None for a in agents) and time.monotonic() < min(deadline, (first_exit or 1e12) + grace):
            if first_exit is None and any(a.poll() is not None for a in agents):
                first_exit = time.monotonic()
            time.sleep(0.05)
        running = [n for n, a in enumerate(agents) if a.poll() is None]
    finally:
        for a in agents:
            _stop_agent(a)
    codes = [a.returncode for a in agents]
    if running or any(codes):
        if not running:
            what = "a node failed"
        elif first_exit is None:
            what = f"both nodes still running after {timeout:.0f} s"
        else:
            what = f"node {running[0]} still running {grace:.0f} s after the other exited"
        texts = [log.read_text() for log in logs]
        tails = [f"\n--- node {n}, exit code {c}:\n{texts[n][-3000:]}" for n, c in enumerate(codes)]
        if any(GLOO_EXIT_ABORT in t for t in texts):  # seen under heavy load, about 1 run in 15
            what += (
                "; a worker aborted as its Python exited (a gloo thread freed a finished collective during"
                " interpreter shutdown and needed the GIL: a torch race, not this test's code)"
            )
        pytest.fail(f"torchrun, two agents: {what} (both now stopped).{''.join(tails)}", pytrace=False)
    written = list(tmp_path.glob("n*.json"))
    assert written == [tmp_path / "n0.json"], f"expected one result file, from node 0 (global rank 0), got {written}"
    return json.loads(written[0].read_text())
