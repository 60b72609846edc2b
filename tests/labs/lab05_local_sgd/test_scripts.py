"""labs/05_local_sgd/scripts/local_sgd_job.py, the take-home script: under torchrun on 2 CPU processes they
really average (different parameters after local updates, identical after each averaging) and the
last, shorter round ends with an outer step; its DiLoCo step is Nesterov SGD on the averaged move;
and the script needs nothing from this repository."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.helpers.ranks import cuda_count

SCRIPT = Path(__file__).resolve().parents[3] / "labs" / "05_local_sgd" / "scripts" / "local_sgd_job.py"


def test_script_imports_nothing_from_the_repository():
    tree = ast.parse(SCRIPT.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names and not {m for m in names if m and m.split(".")[0] in ("lab_utils", "tests")}


def _script():
    spec = importlib.util.spec_from_file_location("local_sgd_job", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_outer_step_is_nesterov_sgd_on_the_averaged_move():
    """The script's DiLoCo step against a hand-written reference (the lab's exercise 3), 3 rounds."""
    job = _script()
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    anchor = [p.detach().clone().requires_grad_() for p in model.parameters()]
    outer = torch.optim.SGD(anchor, lr=0.7, momentum=0.9, nesterov=True)
    ref = [p.detach().clone() for p in model.parameters()]
    buf = [torch.zeros_like(p) for p in ref]
    for _ in range(3):
        with torch.no_grad():  # the averaged parameters after a round of inner steps
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        moved = [p.detach().clone() for p in model.parameters()]
        job.outer_step(model, anchor, outer)
        for r, m, b in zip(ref, moved, buf):
            g = r - m
            b.mul_(0.9).add_(g)
            r.sub_(0.7 * (g + 0.9 * b))
        for p, a, r in zip(model.parameters(), anchor, ref):
            assert torch.allclose(a.detach(), r, atol=1e-6) and torch.equal(p.detach(), a.detach())


@pytest.mark.slow
@pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 processes")
def test_torchrun_averages_every_k_updates_and_ends_with_an_outer_step(tmp_path):
    # one short torchrun run: 2 processes, LocalSGD counted per update (every 4, accumulation 2),
    # ranks apart between averagings and equal after each; 10 updates is not a multiple of 4, so
    # the script's last outer step (not LocalSGD's plain average at exit) ends the run
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    out_file = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT)]
    cmd += ["--processes", "2", "--micro-batches", "20", "--outer-lr", "0.7", "--outer-momentum", "0.9"]
    proc = subprocess.run(
        cmd + ["--out", str(out_file)], capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out_file.read_text())
    assert r["num_processes"] == 2 and r["updates"] == 10 and r["outer_steps"] == 3  # after 4, 8 and 10
    assert r["averaged_after_update"] == [(u + 1) % 4 == 0 for u in range(10)]
    assert r["ranks_equal_after_update"] == r["averaged_after_update"]
    assert r["ranks_equal_at_end"]
