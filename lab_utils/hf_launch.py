"""Running lab 4's job on several processes, and the traps that silently leave you with one.

    from lab_utils import hf_launch
    hf_launch.check_port_free(29500)                 # raises, naming a free port, when taken
    hf_launch.check_no_accelerator()                 # before accelerate.notebook_launcher
    cmd = hf_launch.script_command("accelerate", hf_launch.job_script(), processes=2)
    print(hf_launch.shown(cmd))                      # accelerate launch --multi_gpu --num_processes 2 ...
    out = hf_launch.run_script(cmd)                  # returncode, rank 0's JSON result, the guard's error

Accelerate keeps its state in process-wide singletons: a Trainer or an ``Accelerator()`` made in
a notebook kernel stays there, and ``notebook_launcher`` then refuses to start (``accelerator_exists``,
``reset_accelerate_state``). On a CPU, ``accelerate launch --cpu --num_processes 2`` starts ONE
process and an Accelerator built without ``cpu=True`` leaves each launched process alone:
``check_processes`` turns both into an error that says which happened and what to type instead.
"""

from __future__ import annotations

import os
import socket
import tempfile
from typing import Any

__all__ = [
    "accelerator_exists",
    "reset_accelerate_state",
    "check_no_accelerator",
    "check_port_free",
    "check_processes",
    "LAUNCHERS",
    "script_command",
    "job_script",
    "shown",
    "run_script",
]


def accelerator_exists() -> bool:
    """True once an Accelerator (or a Trainer, which makes one) was created in this process."""
    from accelerate.state import AcceleratorState

    return len(AcceleratorState._shared_state) > 0


def reset_accelerate_state() -> None:
    """Forget the Accelerator singletons of this process (what Accelerate's own tests do), so a
    new Accelerator with other settings can be built. Never needed inside a launched rank."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def check_no_accelerator() -> None:
    """Raise before ``notebook_launcher`` would: an Accelerator already lives in this kernel."""
    if accelerator_exists():
        raise RuntimeError(
            "an Accelerator already exists in this process (a cell created one, or a Trainer did), "
            "so accelerate.notebook_launcher refuses to start processes. Create the Accelerator "
            "only inside the function you launch; here either restart the kernel, call "
            "lab_utils.hf_launch.reset_accelerate_state(), or use lab_utils.launch (fresh processes)."
        )


def check_port_free(port: int, host: str = "127.0.0.1") -> int:
    """Return ``port`` if nothing listens on it, else raise with a free one to use instead."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, int(port)))
        except OSError:
            from lab_utils.launch import free_port

            raise RuntimeError(
                f"port {port} is already taken on {host} (another job, or a launcher that did not "
                f"clean up). Pass a free one, e.g. use_port=str({free_port()}) for notebook_launcher, "
                f"--main_process_port for accelerate launch, --master_port for torchrun, or use "
                f"torchrun --standalone."
            ) from None
    return int(port)


def check_processes(accelerator: Any, expected: int | None) -> None:
    """Raise when this job runs on fewer processes than ``expected`` (the silent fallbacks)."""
    if expected is None or accelerator.num_processes == expected:
        return
    env_world = os.environ.get("WORLD_SIZE")
    if env_world is not None and int(env_world) == expected and accelerator.num_processes == 1:
        why = (
            f"the launcher started {env_world} processes (WORLD_SIZE={env_world}) but each one "
            f"trains alone: on a machine without GPUs create Accelerator(cpu=True) (or set "
            f"ACCELERATE_USE_CPU=1) so the processes join one group"
        )
    else:
        why = (
            f"only {accelerator.num_processes} process(es) were started (WORLD_SIZE={env_world}). "
            f"`accelerate launch --cpu --num_processes {expected}` starts ONE process: use "
            f"`accelerate launch --multi_gpu --num_processes {expected} ...` (with cpu=True in the "
            f"script on CPU), torchrun --nproc_per_node={expected}, or lab_utils.launch"
        )
    raise RuntimeError(
        f"expected {expected} processes, this Accelerator sees "
        f"{accelerator.num_processes} (device {accelerator.device}): {why}."
    )


# ----------------------------------------------------------------------------- script forms
LAUNCHERS = ("accelerate", "accelerate-cpu-trap", "torchrun")


def script_command(
    launcher: str, script: str, *, processes: int = 2, port: int | None = None, args: tuple[str, ...] = ()
) -> list[str]:
    """The command that runs ``script`` on ``processes`` processes (an argv list; ``" ".join``
    shows what to type, with ``accelerate``/``torchrun`` for the first words).

    ``accelerate``: ``accelerate launch --multi_gpu --num_processes N`` (its multi-process path;
    the script builds ``Accelerator(cpu=True)`` when there is no GPU). ``accelerate-cpu-trap``:
    ``accelerate launch --cpu --num_processes N``, which starts ONE process. ``torchrun``:
    ``torchrun --standalone --nproc_per_node N`` (picks its own free port). The script gets
    ``--processes N`` so it checks what it got."""
    import sys

    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher={launcher!r}: choose one of {LAUNCHERS}")
    if port is None:
        from lab_utils.launch import free_port

        port = free_port()
    check_port_free(port)
    acc = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch"]
    n = str(processes)
    if launcher == "accelerate":
        head = acc + [
            "--multi_gpu",
            "--num_processes",
            n,
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(port),
        ]
    elif launcher == "accelerate-cpu-trap":
        head = acc + [
            "--cpu",
            "--num_processes",
            n,
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(port),
        ]
    else:
        head = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", n]
    return head + [script, "--processes", n, *args]


def job_script() -> str:
    """Path of ``labs/scripts/accelerate_job.py``: next to the notebook, else in this repository."""
    from pathlib import Path

    for cand in (
        Path("scripts") / "accelerate_job.py",
        Path(__file__).resolve().parents[1] / "labs" / "scripts" / "accelerate_job.py",
    ):
        if cand.is_file():
            return str(cand)
    raise FileNotFoundError(
        "labs/scripts/accelerate_job.py not found: run from the labs folder "
        "or install this repository with `pip install -e .`"
    )


def shown(cmd: list[str]) -> str:
    """A command list as a person would type it (``accelerate launch ...``, ``torchrun ...``)."""
    import sys

    words = list(cmd)
    if words[:4] == [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch"]:
        words = ["accelerate", "launch"] + words[4:]
    elif words[:3] == [sys.executable, "-m", "torch.distributed.run"]:
        words = ["torchrun"] + words[3:]
    return " ".join(words)


def run_script(cmd: list[str], *, timeout: float = 300.0, cwd: str | None = None) -> dict[str, Any]:
    """Run a launcher command; return ``returncode``, rank 0's JSON result (``result``, or None)
    and ``error``: the last RuntimeError line it printed (the guard's explanation), if any."""
    import json
    import subprocess

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
        proc = subprocess.run(
            list(cmd) + ["--out", out_file],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
        result = None
        if os.path.exists(out_file):
            with open(out_file) as f:
                result = json.load(f)
    errors = [
        ln.split("RuntimeError: ", 1)[1] for ln in (proc.stdout + proc.stderr).splitlines() if "RuntimeError: " in ln
    ]
    return {
        "returncode": proc.returncode,
        "result": result,
        "error": errors[-1] if errors else None,
        "log_tail": (proc.stdout + proc.stderr)[-3000:],
    }
