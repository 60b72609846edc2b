"""labs/07_fsdp_accumulation/scripts/fsdp_accumulate.py under torchrun on 2 processes: sharded, accumulated with one
reduce-scatter per block per update, checkpointed, and equal to the large batch on one process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "labs" / "07_fsdp_accumulation" / "scripts" / "fsdp_accumulate.py"


@pytest.mark.slow
def test_take_home_script_under_torchrun(tmp_path):
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT)]
    cmd += ["--steps", "2", "--k", "3", "--width", "16", "--depth", "2", "--gather-once", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["world_size"] == 2 and r["k"] == 3 and len(r["losses"]) == 2
    assert r["reduce_scatters_per_update"] == 2  # one per block on the last micro-step (3 x 2 if every one synced)
    assert r["all_gathers_per_update"] == 2  # --gather-once: each block once per update (2 x 3 x 2 without)
    assert r["block_forwards_per_micro_step"] == [2, 2]  # forward + recompute: every block checkpointed
    assert r["param_bytes_per_rank"] == [r["param_bytes"] // 2] * 2 == [(16 * 16 + 16) * 8] * 2
    assert r["max_diff_vs_large_batch"] <= 1e-10


def test_script_imports_nothing_from_lab_utils():
    assert "lab_utils" not in "".join(
        line for line in SCRIPT.read_text().splitlines() if line.startswith(("import", "from"))
    )
    assert (
        "torchrun --standalone --nproc_per_node=2 labs/07_fsdp_accumulation/scripts/fsdp_accumulate.py"
        in SCRIPT.read_text()
    )
