"""hf.scripts and labs/scripts/accelerate_job.py: the launcher commands really start 2 processes,
and the single-process traps are caught by the script's guard. The two `accelerate launch` commands
(2 processes, and the --cpu trap) are run and checked by lab 4 itself (section 5, under nbval); the
torchrun forms are run here, both at once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lab_utils.launch import free_port
from lab_utils.topics.hf import scripts
from tests.conftest import cuda_count

SCRIPT = str(Path(__file__).resolve().parents[3] / "labs" / "scripts" / "accelerate_job.py")
two_procs = pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 ranks")


def test_commands_read_as_typed():
    cmd = scripts.command("accelerate", "job.py", processes=2, port=free_port())
    text = scripts.shown(cmd)
    assert text.startswith("accelerate launch --multi_gpu --num_processes 2") and "--cpu" not in text
    assert text.endswith("job.py --processes 2")
    trap = scripts.shown(scripts.command("accelerate-cpu-trap", "job.py"))
    assert trap.startswith("accelerate launch --cpu --num_processes 2")
    assert scripts.shown(scripts.command("torchrun", "job.py")).startswith("torchrun --standalone")
    with pytest.raises(ValueError, match="launcher"):
        scripts.command("mpirun", "job.py")
    assert Path(scripts.job_script()).resolve() == Path(SCRIPT)


def test_run_all_runs_each_command_and_keeps_the_names():
    write = "import json, sys; json.dump({'arg': sys.argv[1]}, open(sys.argv[-1], 'w'))"
    fail = "import sys; print('RuntimeError: expected 2 processes'); sys.exit(3)"
    out = scripts.run_all({"ok": [sys.executable, "-c", write, "x"], "trap": [sys.executable, "-c", fail]}, timeout=60)
    assert list(out) == ["ok", "trap"]
    assert out["ok"]["returncode"] == 0 and out["ok"]["result"] == {"arg": "x"}
    assert out["trap"]["returncode"] == 3 and out["trap"]["result"] is None
    assert out["trap"]["error"] == "expected 2 processes"
    with pytest.raises(ValueError, match="at least one command"):
        scripts.run_all({})


@pytest.fixture(scope="module")
def torchrun_runs():
    """Both torchrun forms at once (one launcher imports while the other's ranks train): the
    2-process run, and on a machine without GPUs the --no-cpu trap."""
    cmds = {"two": scripts.command("torchrun", SCRIPT, processes=2)}
    if cuda_count() == 0:
        cmds["trap"] = scripts.command("torchrun", SCRIPT, processes=2, args=("--no-cpu",))
    return scripts.run_all(cmds, timeout=300)


@pytest.mark.slow
@two_procs
def test_torchrun_runs_two_processes(torchrun_runs):
    out = torchrun_runs["two"]
    assert out["returncode"] == 0, out["log_tail"]
    r = out["result"]
    assert r["num_processes"] == 2 and r["sync"] == [False, False, False, True]
    assert r["collectives"] == [0, 0, 0, 1] and r["scheduler_steps"] == [0, 0, 0, 2]
    assert len(r["evals"]) == 1


@pytest.mark.slow
@pytest.mark.skipif(cuda_count() > 0, reason="the trap is about CPU-only machines")
def test_torchrun_without_cpu_true_is_caught(torchrun_runs):
    out = torchrun_runs["trap"]
    assert out["returncode"] != 0 and "trains alone" in out["error"]
