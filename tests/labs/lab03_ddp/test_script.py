"""labs/03_ddp_no_sync/scripts/ddp_no_sync.py under torchrun: trained on one node, then resumed from its epoch-1
checkpoint in a new one-node torchrun job, it reaches the uninterrupted run's parameters, and the
sampler reshuffles every epoch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.ranks import static_rendezvous

SCRIPT = Path(__file__).resolve().parents[3] / "labs" / "03_ddp_no_sync" / "scripts" / "ddp_no_sync.py"
SMALL = ("--epochs", "2", "--k", "2", "--samples", "64", "--micro-batch", "8", "--width", "8")


@pytest.mark.slow
@pytest.mark.usefixtures("no_orphans")
def test_resumed_run_reaches_the_uninterrupted_one(tmp_path):
    # One node, two processes, two epochs uninterrupted; rank 0 checkpoints after every epoch.
    out, ckpt = tmp_path / "whole.json", tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT)]
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    proc = subprocess.run([*cmd, *SMALL, "--ckpt-dir", str(ckpt), "--out", str(out)], env=env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    whole = json.loads(out.read_text())
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch_1.pt", "epoch_2.pt"]  # one writer, one file per epoch
    # Resumed from the epoch-1 checkpoint in a new torchrun job: only epoch 2 runs. (The two-machine
    # form of torchrun is the suite's once, in tests/core/test_torchrun.py.)
    part = tmp_path / "resumed.json"
    proc = subprocess.run([*cmd, *SMALL, "--resume", str(ckpt / "epoch_1.pt"), "--out", str(part)], env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads(part.read_text())
    assert whole["world_size"] == resumed["world_size"] == 2
    assert whole["epochs_run"] == [0, 1] and resumed["epochs_run"] == [1]
    halfway = torch.cat([t.flatten() for t in torch.load(ckpt / "epoch_1.pt")["model"].values()])
    final = torch.tensor(whole["params"])
    assert (final - halfway).abs().max() > 1e-3  # epoch 2 moved the weights: resuming is not a no-op
    assert torch.allclose(torch.tensor(resumed["params"]), final, atol=1e-6, rtol=0)
    assert resumed["losses"][0] == pytest.approx(whole["losses"][1], abs=1e-6)
    # set_epoch: each epoch draws another order (without it both epochs would start alike), and the
    # resumed run draws epoch 2's order, not epoch 1's again
    assert whole["first_indices"][0] != whole["first_indices"][1]
    assert resumed["first_indices"] == whole["first_indices"][1:]


def test_script_stands_alone_and_says_how_to_run():
    text = SCRIPT.read_text()
    imports = [line for line in text.splitlines() if line.startswith(("import", "from"))]
    assert imports and not any("lab_utils" in line for line in imports)
    assert "torchrun --standalone --nproc_per_node=2 labs/03_ddp_no_sync/scripts/ddp_no_sync.py" in text
    # the two-machine form is the one torchrun_two_agents runs (static rendezvous)
    assert "--nnodes=2 --node_rank=$NODE_RANK" in text
    assert " ".join(static_rendezvous("$MASTER", 29500)) in text
