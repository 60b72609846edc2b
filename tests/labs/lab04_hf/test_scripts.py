"""hf.scripts and labs/04_trainer_to_accelerator/scripts/accelerate_job.py: the take-home script
trains on 2 real processes under `accelerate launch` and resumes from its saved state; the torchrun
trap (no cpu=True) is caught, in the same test. The `accelerate launch --cpu` trap is run by lab 4
itself (under nbval)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from lab_utils.labs.lab04_hf import scripts
from lab_utils.launcher import free_port
from tests.helpers.ranks import cuda_count

SCRIPT = str(
    Path(__file__).resolve().parents[3] / "labs" / "04_trainer_to_accelerator" / "scripts" / "accelerate_job.py"
)
two_procs = pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 ranks")


def test_commands_read_as_typed():
    cmd = scripts.command("accelerate", "job.py", processes=2, port=free_port())
    text = scripts.shown(cmd)
    assert text.startswith("accelerate launch --multi_gpu --num_processes 2") and "--cpu" not in text
    assert text.endswith("job.py --processes 2")
    trap = scripts.shown(scripts.command("accelerate-cpu-trap", "job.py"))
    assert trap.startswith("accelerate launch --cpu --num_processes 2")
    assert scripts.shown(scripts.command("accelerate-cpu-trap", "job.py", checked=False)).endswith("job.py")
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


@pytest.mark.slow
@two_procs
def test_the_script_runs_on_two_processes_and_resumes_where_it_stopped(tmp_path):
    """Under `accelerate launch` on 2 processes: a full run that saves its state after 2 updates,
    then a run resumed from that state, which must end with the same weights and losses."""
    ckpt = tmp_path / "ckpt"
    args = ("--output_dir", str(ckpt), "--checkpoint_every", "2")
    cmds = {"full": scripts.command("accelerate", SCRIPT, processes=2, args=args)}
    if cuda_count() == 0:  # at the same time (one imports while the other trains): torchrun, no cpu=True
        cmds["trap"] = scripts.command("torchrun", SCRIPT, processes=2, args=("--no-cpu",))
    runs = scripts.run_all(cmds, timeout=300)
    full = runs["full"]
    assert full["returncode"] == 0, full["log_tail"]
    if "trap" in runs:
        assert runs["trap"]["returncode"] != 0 and "trains alone" in runs["trap"]["error"]
    r = full["result"]
    assert r["num_processes"] == 2 and r["updates"] == 4 and len(r["losses"]) == 8  # 128 / 8 / 2 ranks
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_2", "step_4"]
    resumed = scripts.run(
        scripts.command("accelerate", SCRIPT, processes=2, args=("--resume_from", str(ckpt / "step_2"))), timeout=300
    )
    assert resumed["returncode"] == 0, resumed["log_tail"]
    s = resumed["result"]
    assert s["num_processes"] == 2 and s["updates"] == 4
    assert s["losses"] == pytest.approx(r["losses"][4:], abs=1e-6)  # the same micro-batches, the same model
    assert s["checksum"] == pytest.approx(r["checksum"], abs=1e-6)


@pytest.mark.slow
def test_a_resume_in_the_second_epoch_of_uneven_epochs_ends_where_the_full_run_does(tmp_path):
    """One process, 2 epochs of 15 micro-batches with windows of 2 (each epoch's last window holds
    one): resumed after 9 updates (1 into the second epoch), the run must read the second epoch's
    order from its third micro-batch on and end with the same weights."""
    ckpt, job = tmp_path / "ckpt", (sys.executable, SCRIPT, "--n-train", "120", "--epochs", "2")
    full = scripts.run([*job, "--output_dir", str(ckpt), "--checkpoint_every", "3"], timeout=300)
    assert full["returncode"] == 0, full["log_tail"]
    r = full["result"]
    assert r["updates"] == 16 and len(r["losses"]) == 30  # 8 updates an epoch: 7 windows of 2, one of 1
    resumed = scripts.run([*job, "--resume_from", str(ckpt / "step_9")], timeout=300)
    assert resumed["returncode"] == 0, resumed["log_tail"]
    s = resumed["result"]
    assert s["updates"] == 16 and s["losses"] == pytest.approx(r["losses"][17:], abs=1e-6)
    assert s["checksum"] == pytest.approx(r["checksum"], abs=1e-6)


@pytest.mark.slow
def test_a_timeout_kills_the_ranks_a_launcher_started_in_their_own_sessions(tmp_path):
    """torchrun and accelerate launch start each rank with a session of its own: on a timeout the
    ranks (here one grandchild in a new session, as a hung rank) must go with the launcher."""
    pid_file = tmp_path / "rank.pid"
    rank = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    launcher = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {rank!r}], start_new_session=True, stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL); time.sleep(120)"
    )
    out = scripts.run([sys.executable, "-c", launcher], timeout=3)
    assert out["returncode"] != 0 and "stopped after 3 s" in out["log_tail"]
    pid = int(pid_file.read_text())
    for _ in range(50):  # SIGKILL is delivered at once; reaping by init can take a moment
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the rank {pid} outlived its launcher's timeout")
