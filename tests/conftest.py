"""Shared fixtures: the process-table check that no rank outlives its test."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid

import pytest

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
    """(pid, command line) of every live rank process (lab_utils.launch or lab_utils.run) that
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
        warm = "lab_utils/_zygote.py" in cmd
        forked_rank = warm and "lab_utils/_zygote.py" in _cmdline(ppid)
        if "lab_utils/_rank.py" in cmd or "lab_utils.run" in cmd or forked_rank or (warm and ppid == "1"):
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


@pytest.fixture
def no_orphans():
    """Fails the test if any rank process is still alive shortly after it, and kills what it left,
    so one leak fails one test instead of every test after it."""
    kill(rank_processes())  # left by an earlier test, which has already failed for it
    yield
    left = wait_no_ranks()
    if left:
        kill(left)
        pytest.fail(f"processes left behind (now killed): {left}")


def cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def torchrun_two_agents(
    function: str,
    tmp_path,
    *,
    kwargs: str | None = None,
    rdzv_id: str = "labtest",
    timeout: float = 240,
    script_args: tuple[str, ...] = (),
) -> dict:
    """Run ``function`` under two torchrun agents (--nnodes=2, one process each) on localhost,
    standing in for two machines; return the JSON that global rank 0 wrote (it alone writes).
    A ``function`` ending in ``.py`` is a script run with ``script_args`` (and ``--out FILE``)
    instead of ``lab_utils.run module:function``."""
    import json
    import subprocess
    import sys

    from lab_utils.launch import free_port

    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    common = (
        [
            "--nnodes=2",
            "--nproc_per_node=1",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{free_port()}",
            f"--rdzv_id={rdzv_id}",
        ]
        + ([str(function), *script_args] if str(function).endswith(".py") else ["-m", "lab_utils.run", function])
        + (["--kwargs", kwargs] if kwargs else [])
        + ["--out"]
    )
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", f"--node_rank={n}"]
            + common
            + [str(tmp_path / f"n{n}.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in (0, 1)
    ]
    try:
        outs = [a.communicate(timeout=timeout) for a in agents]
    finally:
        for a in agents:
            a.kill()
    assert all(a.returncode == 0 for a in agents), [o[1][-2000:] for o in outs]
    written = list(tmp_path.glob("n*.json"))
    assert len(written) == 1, f"expected one result file (global rank 0), got {written}"
    return json.loads(written[0].read_text())
