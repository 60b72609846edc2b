"""The same functions under torchrun: one node with 2 processes, and 2 agents standing in for
two machines (--nnodes=2 on localhost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from lab_utils.env import dist_info
from tests.helpers.ranks import static_rendezvous, torchrun_two_agents, wait_no_ranks

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def whoami() -> dict:
    """Every rank's rank and local rank (where each ran), gathered: run by torchrun below."""
    me = dist_info()
    out: list = [None] * me.world_size
    dist.all_gather_object(out, {"rank": me.rank, "local_rank": me.local_rank})
    return {"ranks": out}


def env():
    return dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")


def test_torchrun_one_node_two_processes(tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.run(
        TORCHRUN
        + [
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "lab_utils.launcher.torchrun",
            "lab_utils.launcher.examples:ddp_regression",
            "--kwargs",
            '{"steps": 3}',
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["rank"] == 0 and result["loss"] > 0


def test_two_agents_stand_in_for_two_machines(tmp_path):
    ranks = torchrun_two_agents("tests.core.test_torchrun:whoami", tmp_path)["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert sorted(r["local_rank"] for r in ranks) == [0, 0]  # one process per "machine"
    assert not wait_no_ranks()


def test_readme_shows_the_two_machine_form_the_suite_runs():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Beyond one machine", 1)[1].split("\n## ", 1)[0]
    assert "--nnodes=2 --node_rank=$NODE_RANK" in section
    assert " ".join(static_rendezvous("$MASTER", 29500)) in section


def test_cli_errors_say_what_to_do():
    """Started without torchrun, or naming a function that does not exist: a clear message and a
    non-zero exit (both processes at once: most of each is importing torch)."""
    no_torchrun = {k: v for k, v in env().items() if k not in ("RANK", "WORLD_SIZE")}
    cases = {
        "Start it with torchrun": ("tests.core.test_torchrun:whoami", no_torchrun),
        "has no function 'nope'": ("lab_utils.launcher.examples:nope", dict(env(), RANK="0", WORLD_SIZE="1")),
    }
    procs = {
        says: subprocess.Popen([sys.executable, "-m", "lab_utils.launcher.torchrun", spec], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=e)
        for says, (spec, e) in cases.items()
    }  # fmt: skip
    for says, proc in procs.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and says in err, err


def test_a_cell_function_travels_by_value_to_torchrun(tmp_path):
    from lab_utils.launcher.torchrun import load_function, save_function

    scale = 3.0

    def typed_in_a_cell(x):  # a closure: no module could import it
        return scale * x

    path = save_function(typed_in_a_cell, str(tmp_path / "fn.pkl"))
    assert load_function(path)(2.0) == 6.0
    with pytest.raises(SystemExit, match="copy it to every machine"):
        load_function(str(tmp_path / "missing.pkl"))
