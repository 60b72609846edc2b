"""Local SGD on real ranks: counted bytes against hand-computed sizes, equalities with DDP and with
PyTorch's post-local SGD, Accelerate's LocalSGD counting, and the same function under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from lab_utils import local_sgd as L
from lab_utils.launch import launch
from lab_utils.simnet import LINKS, allreduce_seconds
from tests.conftest import torchrun_two_agents, wait_no_ranks

pytestmark = pytest.mark.usefixtures("no_orphans")
STEPS = 32


def n_params(dim=32, classes=10, width=64, depth=2) -> int:
    """Parameters of the lab MLP, counted by hand: input layer, depth blocks, output layer."""
    return dim * width + width + depth * (width * width + width) + width * classes + classes


@pytest.fixture(scope="module")
def runs():
    extra = [
        dict(name="H=4 flat", method="local", H=4, flat=True),
        dict(name="adam DDP", method="ddp", optimizer="adam"),
        dict(name="adam H=1", method="local", H=1, optimizer="adam"),
        dict(name="post hand", method="post-local", H=4, warmup=8),
        dict(name="post torch", method="post-local-torch", H=4, warmup=8),
        dict(name="diloco 1/0", method="diloco", H=4, outer_lr=1.0, outer_momentum=0.0),
    ]
    out = launch(L.sweep, 2, kwargs=dict(Hs=[1, 4, 5], steps=STEPS, extra=extra), timeout=300)
    return out[0]


def params(run) -> torch.Tensor:
    return torch.tensor(run["params"])


def test_bytes_are_one_over_h_of_ddp_and_match_the_model_size(runs):
    pbytes = n_params() * 4
    assert runs["DDP"]["param_bytes"] == pbytes
    assert runs["DDP"]["comm"]["bytes"] == STEPS * pbytes  # one gradient of every param per step
    for h in (1, 4):
        assert runs[f"H={h}"]["comm"]["bytes"] * h == runs["DDP"]["comm"]["bytes"]
    # per tensor (8 Linear weights and biases) vs one flat buffer: same bytes, 8x the collectives
    assert runs["H=4"]["n_param_tensors"] == 8
    assert runs["H=4"]["comm"]["collectives"] == 8 * runs["H=4 flat"]["comm"]["collectives"] == 8 * STEPS // 4
    assert runs["H=4"]["comm"]["bytes"] == runs["H=4 flat"]["comm"]["bytes"]


def test_parameters_equal_after_averaging_and_differ_between(runs):
    r = runs["H=4"]
    assert r["synced_steps"] == list(range(3, STEPS, 4))
    per_step = list(zip(*r["rank_step_checksums"]))
    for s, sums in enumerate(per_step):
        assert (sums[0] == sums[1]) == (s in r["synced_steps"]), s


def test_exit_averaging_when_steps_not_a_multiple_of_h(runs):
    r = runs["H=5"]
    assert r["synced_steps"] == [4, 9, 14, 19, 24, 29, STEPS]  # the last one at exit
    assert r["rank_checksums"][0] == r["rank_checksums"][1]
    assert r["comm"]["bytes"] == 7 * n_params() * 4


def test_h1_equals_ddp_with_sgd_not_with_adam(runs):
    assert runs["H=1"]["max_diff_to_ddp"] < 1e-5
    assert (params(runs["adam H=1"]) - params(runs["adam DDP"])).abs().max() > 1e-3
    # the optimizer state is never communicated: Adam's differs by rank


def test_post_local_by_hand_equals_pytorch_post_local_sgd(runs):
    hand, ref = runs["post hand"], runs["post torch"]
    assert (params(hand) - params(ref)).abs().max() < 1e-5
    assert hand["synced_steps"] == ref["synced_steps"] == [11, 15, 19, 23, 27, 31]
    pbytes = n_params() * 4
    assert hand["comm"]["bytes"] == ref["comm"]["bytes"] == (8 + 6) * pbytes  # 8 DDP steps + 6 averagings
    assert ref["comm"]["collectives"] == 8 + 6  # PyTorch flattens
    assert hand["comm"]["collectives"] == 8 + 6 * 8  # ours: one per tensor


def test_diloco_without_outer_momentum_is_local_sgd(runs):
    assert (params(runs["diloco 1/0"]) - params(runs["H=4"])).abs().max() < 1e-6
    assert runs["diloco 1/0"]["comm"]["bytes"] == runs["H=4"]["comm"]["bytes"]


def test_simulated_seconds_by_hand(runs):
    r, link = runs["H=4"], LINKS["1GbE"]
    t = L.simulated_seconds(r, link, 2, step_seconds=1e-3)
    # one ring all-reduce per tensor: 2 (p-1) latencies + 2 (p-1)/p bytes / bandwidth each, p = 2
    per_avg = 8 * 2 * link.latency_s + r["param_bytes"] / link.bandwidth_Bps
    assert per_avg == pytest.approx(sum(allreduce_seconds(e["nbytes"], 2, link) for e in r["events"] if e["step"] == 3))
    assert t[2] == pytest.approx(3e-3)
    assert t[3] == pytest.approx(4e-3 + per_avg)
    assert t[-1] == pytest.approx(STEPS * 1e-3 + 8 * per_avg)


def test_plots_build(runs):
    from lab_utils.plots import local_sgd as P

    step_s = L.compute_per_step(runs)
    assert len(P.loss_curves(runs, ["DDP", "H=4"]).data) == 2
    assert "simulated" in P.loss_vs_time(runs, LINKS["WAN"], 2, step_s, ["DDP", "H=4"]).layout.title.text
    fig = P.time_vs_h(runs, {"WAN": LINKS["WAN"]}, 2, step_s, [1, 4])
    assert "simulated" in fig.layout.title.text
    assert len(P.rank_spread(runs["H=4"]).data) == 2
    assert len(P.comm_bytes(runs, ["DDP", "H=4"]).data[0].x) == 2


def test_exercise_checks(runs, capsys):
    L.check_bytes(STEPS // 4 * n_params() * 4, runs, 4)
    with pytest.raises(AssertionError, match="hint"):
        L.check_bytes(123, runs, 4)
    fake = {
        "averagings": [{"micro_batch": 2, "on_update_boundary": False}, {"micro_batch": 5, "on_update_boundary": True}]
    }
    L.check_averagings((2, 1), fake)
    with pytest.raises(AssertionError):
        L.check_averagings((2, 0), fake)
    assert capsys.readouterr().out.count("✓") == 2


# ----------------------------------------------------------------------------- Accelerate
ACC = {
    "guide": dict(local_sgd_steps=8, accumulation=2),
    "trap": dict(local_sgd_steps=3, accumulation=2),
    "update": dict(local_sgd_steps=3, accumulation=2, count="update"),
    "plain": dict(accumulation=2, use_local_sgd=False),
    "bn": dict(local_sgd_steps=8, accumulation=2, batchnorm=True),
}


@pytest.fixture(scope="module")
def acc():
    return launch(L.accelerate_demos, 2, args=(ACC,), timeout=300)


def expected_averagings(calls_per_micro: bool, k: int, accumulation: int, n: int = 32):
    """(micro-batch index, on an update boundary) of each averaging, from LocalSGD's rule."""
    if calls_per_micro:
        at = [m for m in range(n) if (m + 1) % k == 0]
    else:
        at = [m for m in range(n) if (m + 1) % accumulation == 0 and ((m + 1) // accumulation) % k == 0]
    return [(m, (m + 1) % accumulation == 0) for m in at] + [(n, True)]


@pytest.mark.parametrize("name", ["guide", "trap", "update"])
def test_accelerate_averaging_schedule(acc, name):
    r, cfg = acc[0][name], ACC[name]
    want = expected_averagings(cfg.get("count", "micro-batch") == "micro-batch", cfg["local_sgd_steps"], 2)
    assert [(a["micro_batch"], a["on_update_boundary"]) for a in r["averagings"]] == want
    assert r["num_processes"] == 2 and r["local_sgd_enabled"]
    assert not [e for e in r["events"] if e["source"] == "ddp-hook"]  # no gradient sync
    direct = [e for e in r["events"] if e["source"] == "torch.distributed"]
    assert len(direct) == 8 * len(want)  # one per tensor
    assert sum(e["nbytes"] for e in direct) == len(want) * n_params() * 4
    assert acc[0][name]["param_checksum"] == acc[1][name]["param_checksum"]


def test_accelerate_without_local_sgd_syncs_once_per_update(acc):
    r = acc[0]["plain"]
    hooks = [e for e in r["events"] if e["source"] == "ddp-hook"]
    assert r["updates"] == 16 and len(hooks) == 16
    assert sum(e["nbytes"] for e in hooks) == 16 * n_params() * 4


def test_accelerate_does_not_average_buffers(acc):
    a, b = acc[0]["bn"], acc[1]["bn"]
    assert a["param_checksum"] == b["param_checksum"]
    assert a["buffers"]["1.running_mean"] != b["buffers"]["1.running_mean"]


def test_local_sgd_refuses_deepspeed():
    import types

    from accelerate import DistributedType
    from accelerate.local_sgd import LocalSGD

    with pytest.raises(NotImplementedError, match="DeepSpeed"):
        LocalSGD(
            accelerator=types.SimpleNamespace(distributed_type=DistributedType.DEEPSPEED),
            model=torch.nn.Linear(2, 2),
            local_sgd_steps=4,
        )


def test_single_process_is_silently_disabled():
    # In a fresh interpreter, so this process keeps no Accelerator state.
    code = (
        "import json; from lab_utils.local_sgd import accelerate_run as a; r = a(local_sgd_steps=4); "
        "print(json.dumps([r['num_processes'], r['local_sgd_enabled'], len(r['events'])]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, False, 0]


def test_errors_say_what_to_do():
    with pytest.raises(RuntimeError, match="lab_utils.launch"):
        L.train("local")
    with pytest.raises(ValueError, match="method"):
        L.train("nope")
    with pytest.raises(ValueError, match="H="):
        L.train("local", H=0)
    with pytest.raises(ValueError, match="skew"):
        L.rank_shard(torch.zeros(4, dtype=torch.long), 0, 2, skew=2.0)


def test_rank_shards_partition_the_data():
    y = torch.arange(40) % 10
    for skew in (0.0, 0.5, 1.0):
        shards = [L.rank_shard(y, r, 2, skew) for r in range(2)]
        assert sorted(torch.cat(shards).tolist()) == list(range(40))
    only_own = [set((y[L.rank_shard(y, r, 2, 1.0)] % 2).tolist()) for r in range(2)]
    assert only_own == [{0}, {1}]
    assert L.rank_shard(y, 1, 2, 0.0).tolist() == list(range(1, 40, 2))


# ----------------------------------------------------------------------------- torchrun
@pytest.mark.slow
def test_two_torchrun_agents_give_launchs_result(runs, tmp_path):
    """Two agents (--nnodes=2 on localhost) stand in for two machines; rank 0's result equals
    the one launch() produced for the same arguments."""
    kwargs = json.dumps({"method": "local", "H": 4, "steps": STEPS})
    result = torchrun_two_agents("lab_utils.local_sgd:train", tmp_path, kwargs=kwargs, rdzv_id="lab5")
    assert result["world_size"] == 2
    # torchrun gives each single-process agent both cores (launch: one thread per rank), so the
    # matmuls may sum in another order: equal up to rounding, not bit for bit.
    assert result["final_checksum"] == pytest.approx(runs["H=4"]["final_checksum"], abs=1e-4)
    assert result["eval_loss"] == pytest.approx(runs["H=4"]["eval_loss"], rel=1e-4)
    assert result["comm"]["bytes"] == runs["H=4"]["comm"]["bytes"]
    assert not wait_no_ranks()
