"""The traps that leave an Accelerate job on one process, turned into errors that say what to do.

Accelerate's state is process-wide: an ``Accelerator()`` (or Trainer) made in a kernel stays, and
``notebook_launcher`` then refuses to start. On a CPU, ``accelerate launch --cpu --num_processes 2``
starts ONE process, and an Accelerator without ``cpu=True`` leaves each process alone.
And the talk's names (transformers 4.x) that 5.24 refuses or warns about, with what it calls them:

    guards.TALK_TO_CURRENT["evaluation_strategy"]     # 'eval_strategy'
"""

from __future__ import annotations

import os
import socket
from typing import Any

from accelerate.state import AcceleratorState

from lab_utils.launcher import free_port

__all__ = [
    "TALK_TO_CURRENT",
    "accelerator_exists",
    "check_no_accelerator",
    "check_port_free",
    "check_processes",
]

# Names in the talk -> names transformers 5.24 expects.
TALK_TO_CURRENT: dict[str, str] = {
    "evaluation_strategy": "eval_strategy",  # TrainingArguments: renamed in 4.x, since removed (TypeError)
    "no_cuda": "use_cpu",  # TrainingArguments: removed in 5.x (TypeError)
    "gradient_checkpointing": "activation_checkpointing",  # TrainingArguments: works, FutureWarning
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",  # works in 5.x, FutureWarning
    "tokenizer": "processing_class",  # Trainer(tokenizer=) -> processing_class=
    "gradient_checkpointing_enable": "activation_checkpointing_enable",  # model method, FutureWarning
    "is_gradient_checkpointing": "is_activation_checkpointing",  # model property, FutureWarning
}


def accelerator_exists() -> bool:
    """True once an Accelerator (or a Trainer, which makes one) was created in this process."""
    return len(AcceleratorState._shared_state) > 0


def check_no_accelerator() -> None:
    """Raise before ``notebook_launcher`` would: an Accelerator already lives in this kernel."""
    if accelerator_exists():
        raise RuntimeError(
            "an Accelerator already exists in this process (a cell created one, or a Trainer did), "
            "so accelerate.notebook_launcher refuses to start processes. Create the Accelerator "
            "only inside the function you launch; here either restart the kernel, call "
            "accelerate_meter.reset_accelerate_state(), or use lab_utils.launch (fresh processes)."
        )


def check_port_free(port: int, host: str = "127.0.0.1") -> int:
    """Return ``port`` if nothing listens on it, else raise with a free one to use instead."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, int(port)))
        except OSError:
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
