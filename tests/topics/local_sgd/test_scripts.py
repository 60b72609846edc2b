"""labs/scripts/local_sgd_job.py, the take-home script: under `accelerate launch` on 2 CPU
processes the processes really average (different parameters after local updates, identical
after each averaging), and the script needs nothing from this repository."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab_utils.launch import free_port
from tests.conftest import cuda_count

SCRIPT = Path(__file__).resolve().parents[3] / "labs" / "scripts" / "local_sgd_job.py"


def test_script_imports_nothing_from_the_repository():
    tree = ast.parse(SCRIPT.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names and not {m for m in names if m and m.split(".")[0] in ("lab_utils", "tests")}


@pytest.mark.slow
@pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 processes")
def test_accelerate_launch_averages_every_k_updates(tmp_path):
    # one run checks everything: 2 processes, LocalSGD counted per update (4 of them per averaging,
    # accumulation 2), ranks apart between averagings, equal after each one (DiLoCo's outer step
    # included) and at the end
    port = str(free_port())
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.accelerate_cli",
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
    ]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", port]
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", HF_HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("ACCELERATE_USE_CPU", None)  # the script itself must build Accelerator(cpu=True)
    out_file = tmp_path / "result.json"
    cmd = launch + [str(SCRIPT), "--processes", "2", "--out", str(out_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out_file.read_text())
    assert r["num_processes"] == 2 and r["updates"] == 12
    assert r["averaged_after_update"] == [(u + 1) % 4 == 0 for u in range(12)]
    assert r["ranks_equal_after_update"] == r["averaged_after_update"]
    assert r["ranks_equal_at_end"] and r["losses"][-1] < r["losses"][0]
