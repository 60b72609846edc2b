"""labs/scripts/local_sgd_job.py, the take-home script: under `accelerate launch` on 2 CPU
processes the processes really average (different parameters after local updates, identical
after each averaging), and the script needs nothing from this repository."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lab_utils.topics.hf import scripts
from tests.conftest import cuda_count

SCRIPT = Path(__file__).resolve().parents[3] / "labs" / "scripts" / "local_sgd_job.py"


def test_script_imports_nothing_from_the_repository():
    tree = ast.parse(SCRIPT.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names and not {m for m in names if m and m.split(".")[0] in ("lab_utils", "tests")}


@pytest.mark.slow
@pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 processes")
def test_accelerate_launch_averages_every_k_updates():
    # one run checks everything: 2 processes, LocalSGD counted per update (4 of them per averaging,
    # accumulation 2), ranks apart between averagings, equal after each one (DiLoCo's outer step
    # included) and at the end
    out = scripts.run(scripts.command("accelerate", str(SCRIPT), processes=2), timeout=300)
    assert out["returncode"] == 0, out["log_tail"]
    r = out["result"]
    assert r["num_processes"] == 2 and r["updates"] == 12
    assert r["averaged_after_update"] == [(u + 1) % 4 == 0 for u in range(12)]
    assert r["ranks_equal_after_update"] == r["averaged_after_update"]
    assert r["ranks_equal_at_end"] and r["losses"][-1] < r["losses"][0]
