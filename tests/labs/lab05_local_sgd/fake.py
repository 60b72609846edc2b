"""A ``record.Run`` and an ``AccelerateRun`` built by hand, for tests of what consumes runs
(figures, costs)."""

from __future__ import annotations

from typing import Any

import torch

from lab_utils.labs.lab05_local_sgd.accelerate_runs import AccelerateRun
from lab_utils.labs.lab05_local_sgd.record import Run


def fake_run(**fields: Any) -> Run:
    """A Run whose unnamed fields are empty: pass the ones the code under test reads."""
    empty: dict[str, Any] = dict(method="fake", steps=0, world_size=2, losses=[], fingerprints=[], drift=[],
                                 eval_curve=[], eval_loss=0.0, comm={}, events=[], synced_steps=[], step_s=[],
                                 opt_state="", params=torch.zeros(0), param_bytes=0, n_param_tensors=0)  # fmt: skip
    return Run(**{**empty, **fields})


def fake_accelerate(**fields: Any) -> AccelerateRun:
    """An AccelerateRun whose unnamed fields are empty: pass the ones the code under test reads."""
    empty: dict[str, Any] = dict(num_processes=2, distributed_type="MULTI_CPU", micro_batches=0, updates=0,
                                 sync_flags=[], events=[], n_param_tensors=0, param_bytes=0, barriers=[],
                                 averagings=[], param_fingerprint="", buffer_fingerprint="", rank=0)  # fmt: skip
    return AccelerateRun(**{**empty, **fields})
