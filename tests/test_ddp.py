"""lab_utils.ddp: the three accumulation loops on 2 real ranks, DDP's flags around no_sync, bucket
counts, and the time sweep. Expected counts and bucket sizes are computed by hand from the model's
shapes; final parameters are compared with a single-process large batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from lab_utils import ddp as L
from lab_utils import launch
from lab_utils.simnet import Link

pytestmark = pytest.mark.usefixtures("no_orphans")

# A small model whose sizes are easy to add up by hand:
# Linear(8, 64): 2048 + 256 B; 2 x Linear(64, 64): 16384 + 256 B each; Linear(64, 1): 256 + 4 B.
SMALL = {"dim": 8, "width": 64, "depth": 2, "micro_batch": 4}
PARAM_BYTES = (8 * 64 + 64 + 2 * (64 * 64 + 64) + 64 + 1) * 4
CAP = 16384 / 2**20  # one block's weight: every weight closes a bucket
BY_HAND = [4 + 256 + 256 + 16384, 256 + 16384, 256 + 2048]  # gradients in reverse order
K = 3


def _all(k: int, updates: int) -> dict:
    """Everything the tests look at, in one launch (each launch costs seconds here)."""

    def custom(ddp, opt, micro):  # an exercise-style loop: no_sync done right
        opt.zero_grad()
        for i, (x, y) in enumerate(micro):
            with ddp.no_sync() if i < len(micro) - 1 else torch.enable_grad():
                (torch.nn.functional.mse_loss(ddp(x), y) / len(micro)).backward()
        opt.step()

    return {
        "modes": L.compare_modes(k, updates=updates, **SMALL),
        "custom": L.run_mode(custom, k, updates=updates, **SMALL),
        "inside": L.inside_ddp(caps=(None, 25, CAP), steps=3, **SMALL),
        "sweep": L.time_sweep(ks=(1, 2, 4), updates=1, bucket_cap_mb=CAP, **SMALL),
    }


@pytest.fixture(scope="module")
def runs():
    return launch(_all, 2, args=(K, 2), timeout=240)


def test_counts_per_update_match_the_loop(runs):
    modes = runs[0]["modes"]["modes"]
    assert modes["naive"]["collectives_per_update"] == [K, K]  # one bucket, K synced backwards
    assert modes["no_sync"]["collectives_per_update"] == [1, 1]
    assert modes["forward_outside"]["collectives_per_update"] == [K, K]  # the mistake still syncs
    assert modes["no_sync"]["bytes_per_update"] == [PARAM_BYTES] * 2
    assert modes["naive"]["bytes_per_update"] == [K * PARAM_BYTES] * 2
    assert runs[0]["custom"]["collectives_per_update"] == [1, 1]


def test_all_loops_equal_one_large_batch(runs):
    ref = L.large_batch_reference(k=K, world_size=2, updates=2, **SMALL)
    start = L.flat_params(L.make_model(**{**L.SETUP, **SMALL}))
    assert (ref - start).abs().max() > 1e-3  # training moved the weights
    for rank in (0, 1):
        for mode, res in runs[rank]["modes"]["modes"].items():
            assert (res["params"] - ref).abs().max() < 1e-6, (rank, mode)
    m0, m1 = runs[0]["modes"]["modes"], runs[1]["modes"]["modes"]
    # Same arithmetic: naive and forward_outside are bit-identical, and every rank holds the same model.
    assert m0["naive"]["digest"] == m0["forward_outside"]["digest"]
    assert all(m0[m]["digest"] == m1[m]["digest"] for m in L.MODES)


def test_reducer_flags_around_no_sync(runs):
    rows = {r["scenario"]: r for r in runs[0]["inside"]["probe"]}
    assert list(rows) == list(L.SCENARIOS)
    n_params = 8
    synced = {
        "plain step": True,
        "forward + backward inside no_sync": False,
        "forward outside, backward inside": True,
        "forward inside, backward outside": False,
        "plain step after it (grads kept)": True,
    }
    for name, sync in synced.items():
        r = rows[name]
        # Only the flag at forward time decides: it arms the reducer, and the backward obeys.
        assert r["flag_at_forward"] == r["prepare_for_backward"] == r["forward_param_sync"] == sync, name
        assert r["comm_hook_calls"] == (1 if sync else 0), name
        assert r["grads_equal"] == sync, name
        assert r["grad_hooks"] == n_params, name  # autograd hooks fire regardless
    assert rows["forward outside, backward inside"]["flag_at_backward"] is False
    assert rows["forward inside, backward outside"]["flag_at_backward"] is True


def test_buckets_rebuild_after_first_backward(runs):
    b = runs[0]["inside"]["buckets"]
    assert b["param_bytes"] == [2048, 256, 16384, 256, 16384, 256, 256, 4]
    assert b["per_step"]["25"] == [1, 1, 1]
    assert b["per_step"]["None"] == [1, 1, 1]  # 33 KB: under the 1 MiB first bucket
    assert b["per_step"][str(CAP)] == [1, 3, 3]  # one bucket until the rebuild
    assert b["bucket_bytes"][str(CAP)][0] == [PARAM_BYTES]
    assert b["bucket_bytes"][str(CAP)][1] == BY_HAND


def test_predict_buckets_by_hand():
    sizes = list(reversed([2048, 256, 16384, 256, 16384, 256, 256, 4]))
    assert L.predict_buckets(sizes, 16384) == BY_HAND
    assert L.predict_buckets(sizes, 10**9) == [PARAM_BYTES]
    assert L.predict_buckets([5, 5, 5, 5], 10, first_cap_bytes=5) == [5, 10, 5]


def test_time_sweep_counts_and_simulation(runs):
    sweep = runs[0]["sweep"]
    for row in sweep["rows"]:
        assert len(row["naive_events"]) == 3 * row["k"] and len(row["no_sync_events"]) == 3
        assert sum(e["nbytes"] for e in row["no_sync_events"]) == PARAM_BYTES
        assert row["compute_s"] > 0
    link = Link("test", latency_s=1e-3, bandwidth_Bps=1e6)
    sim = L.simulated_update_seconds(sweep, link)
    # Ring all-reduce on 2 ranks: 2 alpha + n / beta per bucket (three buckets, sizes by hand).
    one_round = sum(2e-3 + n / 1e6 for n in BY_HAND)
    for i, row in enumerate(sweep["rows"]):
        assert sim["no_sync"][i] == pytest.approx(row["compute_s"] + one_round)
        assert sim["naive"][i] == pytest.approx(row["compute_s"] + row["k"] * one_round)


def test_micro_batches_tile_the_large_batch():
    x = torch.arange(2 * 3 * 2 * 4).float()[:, None]
    for u in range(2):
        got = torch.cat(
            [xb for r in range(2) for xb, _ in L.micro_batches(x, x, u, k=3, rank=r, world_size=2, micro_batch=4)]
        )
        assert sorted(got.flatten().tolist()) == list(range(u * 24, (u + 1) * 24))


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="unknown setting.*'widht'"):
        L.large_batch_reference(widht=3)
    with pytest.raises(ValueError, match="mode='sometimes'"):
        L.accumulation_update(
            None,
            torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1),
            [(torch.zeros(1), torch.zeros(1))],
            "sometimes",
        )


def test_figures(runs):
    from lab_utils.plots import ddp as P
    from lab_utils.simnet import LINKS

    assert [t.y for t in P.comm_figure(runs[0]["modes"]["modes"]).data][0] == (K, 1, K)
    assert len(P.flag_table(runs[0]["inside"]["probe"]).data[0].cells.values[0]) == len(L.SCENARIOS)
    assert len(P.bucket_figure(runs[0]["inside"]["buckets"]["per_step"]).data) == 3
    fig = P.time_figure(L.simulated_update_seconds(runs[0]["sweep"], LINKS["1GbE"]), "1GbE")
    assert "simulated" in fig.layout.title.text and len(fig.data) == 3


@pytest.mark.slow
def test_torchrun_gives_the_launch_result(tmp_path, runs):
    out = tmp_path / "r.json"
    kwargs = {"k": K, "updates": 2, "return_params": False, **SMALL}
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "lab_utils.run",
            "lab_utils.ddp:compare_modes",
            "--kwargs",
            json.dumps(kwargs),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())["modes"]
    for mode, res in runs[0]["modes"]["modes"].items():
        assert got[mode]["collectives_per_update"] == res["collectives_per_update"]
        assert got[mode]["digest"] == res["digest"], mode  # bit-identical parameters
        assert "params" not in got[mode]


def test_link_explorer_redraws_from_the_sweep(runs):
    from lab_utils.plots import ddp as P

    sweep = runs[0]["sweep"]
    box = P.link_explorer(sweep, preset="1GbE")
    drop, bw, lat = box.children[0].children
    out = box.children[1]

    def shown():
        return out.outputs[0]["data"]["application/vnd.plotly.v1+json"]

    assert "1GbE" in shown()["layout"]["title"]["text"] and "simulated" in shown()["layout"]["title"]["text"]
    bw.value = 100.0  # a slider move makes the link custom
    assert drop.value == "custom"
    want = L.simulated_update_seconds(sweep, Link.from_gbit("x", 100.0, lat.value))
    assert shown()["data"][0]["y"] == pytest.approx(want["naive"])
    assert shown()["data"][1]["y"] == pytest.approx(want["no_sync"])
    drop.value = "WAN"  # a preset moves the sliders
    assert bw.value == pytest.approx(0.1) and lat.value == pytest.approx(20_000)
    assert "WAN" in shown()["layout"]["title"]["text"]
