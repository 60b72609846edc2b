"""Lab 4's job as a script on N processes: the commands to type, and running them.

    cmd = scripts.command("accelerate", scripts.job_script(), processes=2)
    out = scripts.run(cmd)         # returncode, the main process's JSON result, the guard's error line

Launchers: ``accelerate`` (``--multi_gpu``; the script builds ``Accelerator(cpu=True)`` without a
GPU), ``accelerate-cpu-trap`` (``--cpu``: ONE process, whatever ``--num_processes`` says) and
``torchrun`` (``--standalone`` picks a free port).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lab_utils.labs.lab04_hf.guards import check_port_free
from lab_utils.launcher import free_port
from lab_utils.launcher.proctree import kill_tree

__all__ = ["LAUNCHERS", "command", "job_script", "shown", "run", "run_all"]

LAUNCHERS = ("accelerate", "accelerate-cpu-trap", "torchrun")
_ACCELERATE = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch"]
_TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def command(
    launcher: str,
    script: str,
    *,
    processes: int = 2,
    port: int | None = None,
    args: tuple[str, ...] = (),
    checked: bool = True,
) -> list[str]:
    """The argv that runs ``script`` on ``processes`` processes with ``launcher`` (one of
    ``LAUNCHERS``); with ``checked`` the script gets ``--processes N`` and stops when it got fewer,
    without it the script trains on whatever it got (and reports ``num_processes``)."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher={launcher!r}: choose one of {LAUNCHERS}")
    port = check_port_free(free_port() if port is None else port)
    n = str(processes)
    common = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    if launcher == "accelerate":
        head = _ACCELERATE + ["--multi_gpu", "--num_processes", n, *common, "--main_process_port", str(port)]
    elif launcher == "accelerate-cpu-trap":
        head = _ACCELERATE + ["--cpu", "--num_processes", n, *common, "--main_process_port", str(port)]
    else:
        head = _TORCHRUN + ["--standalone", "--nproc_per_node", n]
    return head + [script, *(["--processes", n] if checked else []), *args]


def job_script() -> str:
    """Path of the take-home ``scripts/accelerate_job.py``: next to the notebook (lab 4's folder), else in
    this repository's ``labs/04_trainer_to_accelerator/``."""
    for cand in (
        Path("scripts") / "accelerate_job.py",
        Path(__file__).resolve().parents[3] / "labs" / "04_trainer_to_accelerator" / "scripts" / "accelerate_job.py",
    ):
        if cand.is_file():
            return str(cand)
    raise FileNotFoundError(
        "scripts/accelerate_job.py not found: run from lab 4's folder (labs/04_trainer_to_accelerator) "
        "or install this repository with `pip install -e .`"
    )


def shown(cmd: list[str]) -> str:
    """A command list as a person would type it (``accelerate launch ...``, ``torchrun ...``)."""
    words = list(cmd)
    if words[:4] == _ACCELERATE:
        words = ["accelerate", "launch"] + words[4:]
    elif words[:3] == _TORCHRUN:
        words = ["torchrun"] + words[3:]
    return " ".join(words)


def run(cmd: list[str], *, timeout: float = 300.0, cwd: str | None = None) -> dict[str, Any]:
    """Run a launcher command; return ``returncode``, rank 0's JSON result (``result``, or None),
    ``error`` (the last RuntimeError line printed: the guard's explanation) and ``log_tail``."""
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("ACCELERATE_USE_CPU", None)
    with tempfile.TemporaryDirectory(prefix="lab_hf_script_") as tmp:
        env["HF_HOME"] = tmp  # no personal `accelerate config` file changes the run
        out_file = os.path.join(tmp, "result.json")
        proc = subprocess.Popen(list(cmd) + ["--out", out_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL)  # fmt: skip
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # the launcher's ranks live in sessions of their own
            kill_tree(proc.pid)
            stdout, stderr = proc.communicate()
            stderr += f"\n(stopped after {timeout:g} s with every process it started)"
        result = None
        if os.path.exists(out_file):
            with open(out_file) as f:
                result = json.load(f)
    log = stdout + stderr
    errors = [ln.split("RuntimeError: ", 1)[1] for ln in log.splitlines() if "RuntimeError: " in ln]
    return {
        "returncode": proc.returncode,
        "result": result,
        "error": errors[-1] if errors else None,
        "log_tail": log[-3000:],
    }


def run_all(cmds: Mapping[str, list[str]], *, timeout: float = 300.0, cwd: str | None = None) -> dict[str, Any]:
    """``run`` for several commands at the same time (their processes overlap: one launcher waits
    for its ranks while the other imports); ``{name: run(cmd)}`` in the order given."""
    if not cmds:
        raise ValueError("run_all needs at least one command, as {name: command}")
    with ThreadPoolExecutor(max_workers=len(cmds)) as pool:
        futures = {name: pool.submit(run, cmd, timeout=timeout, cwd=cwd) for name, cmd in cmds.items()}
        return {name: future.result() for name, future in futures.items()}
