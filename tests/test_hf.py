"""lab_utils.hf, hf_launch, hf_mechanics: metrics, names, guards, Trainer == Accelerate loop, and the multi-process forms
(lab_utils.launch, accelerate launch, torchrun) really running 2 processes."""

from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lab_utils import hf, hf_launch
from lab_utils import hf_mechanics as mech
from tests.conftest import cuda_count

SCRIPT = str(Path(__file__).resolve().parents[1] / "labs" / "scripts" / "accelerate_job.py")
TINY = dict(n_train=32, n_val=16, batch_size=4, grad_accum=2, epochs=1, lr=1e-3)
# Two CPU processes need no GPU; with exactly one GPU both ranks would want cuda:0.
two_procs = pytest.mark.skipif(cuda_count() == 1, reason="needs 0 or >= 2 GPUs for 2 ranks")


# ----------------------------------------------------------------------------- metrics and data
def test_accuracy_f1_by_hand():
    preds, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    # TP=2 (idx 0, 4), FP=1 (idx 1), FN=1 (idx 3): F1 = 4 / (4 + 1 + 1); 3 of 5 right
    m = hf.accuracy_f1(preds, labels)
    assert m["accuracy"] == pytest.approx(0.6) and m["f1"] == pytest.approx(4 / 6)
    logits = np.array([[0.0, 2.0], [0.0, 1.0], [3.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    assert hf.compute_metrics((logits, np.array(labels))) == m
    assert hf.accuracy_f1([0, 0], [0, 0])["f1"] == 0.0  # no positives anywhere
    with pytest.raises(ValueError, match="predictions"):
        hf.accuracy_f1([1, 0], [1])


def test_splits_follow_the_rule_and_do_not_overlap():
    train, val = hf.make_splits(40, 20, max_len=12, seed=3)
    assert len(train) == 40 and len(val) == 20
    for ds in (train, val):
        for i in range(len(ds)):
            item = ds[i]
            ids = item["input_ids"][item["attention_mask"].bool()]
            high = int((ids >= 64).sum())
            assert int(item["labels"]) == int(2 * high > len(ids))
    assert not any(torch.equal(train.input_ids[i], val.input_ids[j]) for i in range(40) for j in range(20))
    assert train.order == list(range(40))  # every read was recorded
    assert 0.2 < train.labels.float().mean() < 0.8


# ----------------------------------------------------------------------------- names
def test_current_names_give_warning_free_training_args(tmp_path):
    talk = dict(evaluation_strategy="epoch", gradient_checkpointing=True, no_cuda=True)
    new = hf.current_names(**talk)
    assert new == {"eval_strategy": "epoch", "activation_checkpointing": True, "use_cpu": True}
    from transformers import TrainingArguments

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        args = TrainingArguments(output_dir=str(tmp_path), report_to="none", **new)
    assert args.activation_checkpointing and args.eval_strategy == "epoch"
    # the map is real: the old names fail or warn on the pinned version
    for removed in ("evaluation_strategy", "no_cuda"):
        with pytest.raises(TypeError):
            TrainingArguments(output_dir=str(tmp_path), **{removed: talk[removed]})
    with pytest.warns(FutureWarning, match="activation_checkpointing"):
        TrainingArguments(output_dir=str(tmp_path), report_to="none", gradient_checkpointing=True)
    with pytest.raises(ValueError, match="same setting"):
        hf.current_names(gradient_checkpointing=True, activation_checkpointing=True)


def test_checkpointing_is_enabled_under_its_new_name():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = hf.build_model(checkpointing=True)
        assert model.is_activation_checkpointing
        assert not hf.build_model().is_activation_checkpointing


# ----------------------------------------------------------------------------- guards
def test_port_guard():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {taken} is already taken"):
            hf_launch.check_port_free(taken)
    assert hf_launch.check_port_free(taken) == taken  # released


def test_accelerator_guard():
    from accelerate import Accelerator

    hf_launch.reset_accelerate_state()
    hf_launch.check_no_accelerator()
    Accelerator(cpu=True)
    assert hf_launch.accelerator_exists()
    with pytest.raises(RuntimeError, match="notebook_launcher refuses"):
        hf_launch.check_no_accelerator()
    hf_launch.reset_accelerate_state()
    assert not hf_launch.accelerator_exists()


def test_process_guard_explains_both_fallbacks(monkeypatch):
    alone = SimpleNamespace(num_processes=1, device="cpu")
    hf_launch.check_processes(alone, None)
    hf_launch.check_processes(alone, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"cpu=True"):
        hf_launch.check_processes(alone, 2)
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(RuntimeError, match=r"--cpu --num_processes 2` starts ONE process"):
        hf_launch.check_processes(alone, 2)


def test_loss_scaling_belief():
    model = hf.build_model()
    assert hf.model_scales_loss_itself(model)  # forward(**kwargs): Trainer will not divide
    model.accepts_loss_kwargs = False
    assert not hf.model_scales_loss_itself(model)
    assert not hf.model_scales_loss_itself(torch.nn.Linear(2, 2))


# ----------------------------------------------------------------------------- what Accelerate does
def test_backward_divides_by_accumulation_steps():
    for k in (2, 4):
        assert mech.backward_scaling(k)["grad_ratio"] == pytest.approx(1 / k, rel=1e-5)
    assert not hf_launch.accelerator_exists()


def test_scheduler_wrapper_skips_non_sync_steps():
    k, n = 4, 16
    prepared = mech.scheduler_lrs(micro_batches=n, grad_accum=k, prepared=True)
    # linear decay over n/k updates; the schedule moves once per k micro-batches
    assert prepared == pytest.approx([1 - ((i + 1) // k) / (n // k) for i in range(n)])
    plain = mech.scheduler_lrs(micro_batches=n, grad_accum=k, prepared=False)
    assert plain[: n // k] == pytest.approx([1 - (i + 1) / (n // k) for i in range(n // k)])
    assert plain[-1] == 0.0 and prepared[n // 2 - 1] == pytest.approx(0.5)


def test_num_items_in_batch_matches_the_big_batch():
    r = mech.token_loss_normalisation()
    assert len(set(r["tokens_per_micro_batch"])) > 1  # uneven on purpose
    assert r["num_items_in_batch"] == pytest.approx(r["big_batch"], rel=1e-5)
    assert r["grad_gap_num_items"] < 1e-4
    assert r["grad_gap_mean_of_means"] > 1e-2


def test_trainer_and_accelerate_loop_agree():
    t = hf.run_trainer(**TINY)
    a = hf.run_accelerate(**TINY)
    assert t["order"] == a["order"] and sorted(t["order"]) == list(range(32))  # shuffled, same
    assert t["order"] != list(range(32))
    assert len(t["micro_losses"]) == 8 and hf.loss_gap(t, a) < 1e-5
    assert t["updates"] == a["updates"] == 4
    assert t["lrs"] == pytest.approx(a["lrs"])
    for e_t, e_a in zip(t["evals"], a["evals"], strict=True):
        assert e_t["eval_accuracy"] == e_a["eval_accuracy"] and e_t["eval_f1"] == e_a["eval_f1"]
        assert e_t["eval_loss"] == pytest.approx(e_a["eval_loss"], abs=1e-5)
    assert a["sync"] == [False, True] * 4 and a["optimizer_steps"] == [0, 1, 1, 2, 2, 3, 3, 4]
    assert t["saved_bytes"] == a["saved_bytes"] > 0  # the same forward, the same saved tensors
    assert not hf_launch.accelerator_exists()


@pytest.mark.slow
def test_trainer_skips_the_division_when_it_trusts_the_model():
    unfixed = hf.run_trainer(**TINY, fix_loss_scaling=False, eval_each_epoch=False)
    fixed = hf.run_trainer(**TINY, eval_each_epoch=False)
    assert unfixed["model_claims_loss_kwargs"] and not unfixed["trainer_divides_loss"]
    # the logged loss of an update is the sum of its micro-batch means instead of their mean
    k = TINY["grad_accum"]
    mb = fixed["micro_losses"]
    windows = [sum(mb[i : i + k]) / k for i in range(0, len(mb), k)]
    assert fixed["step_losses"] == pytest.approx(windows, rel=1e-5)
    ratio = np.array(unfixed["step_losses"][:1]) / np.array(fixed["step_losses"][:1])
    assert ratio == pytest.approx(k, rel=1e-5)


@pytest.mark.slow
def test_checkpointing_and_accumulation_cut_saved_bytes():
    job = dict(n_train=32, n_val=16, epochs=1, eval_each_epoch=False, meter_batches=1)
    plain = hf.run_trainer(**job, batch_size=8, grad_accum=1, checkpointing=False)
    accum = hf.run_trainer(**job, batch_size=2, grad_accum=4, checkpointing=False)
    ckpt = hf.run_trainer(**job, batch_size=2, grad_accum=4, checkpointing=True)
    assert plain["saved_bytes"] == pytest.approx(4 * accum["saved_bytes"], rel=0.02)
    assert ckpt["saved_bytes"] < accum["saved_bytes"] / 3


# ----------------------------------------------------------------------------- several processes
@pytest.mark.slow
@two_procs
@pytest.mark.usefixtures("no_orphans")
def test_two_ranks_sync_only_on_sync_steps():
    from lab_utils import launch

    job = dict(n_train=32, n_val=16, batch_size=4, grad_accum=2, epochs=1, expected_processes=2)
    ranks = launch(hf.run_accelerate, 2, kwargs=job, timeout=240)
    assert [r["num_processes"] for r in ranks] == [2, 2] and [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["sync"] == [False, True] * 2
        assert all((c > 0) == s for c, s in zip(r["collectives"], r["sync"]))
        assert r["optimizer_steps"] == [0, 1, 1, 2]
        assert r["scheduler_steps"] == [0, 2, 2, 4]  # num_processes steps per update
    assert sorted(ranks[0]["order"] + ranks[1]["order"]) == list(range(32))  # disjoint shards
    assert ranks[0]["evals"] == ranks[1]["evals"]  # gathered over both ranks


def _two_process_result(launcher):
    out = hf_launch.run_script(hf_launch.script_command(launcher, SCRIPT, processes=2), timeout=300)
    assert out["returncode"] == 0, out["log_tail"]
    return out["result"]


@pytest.mark.slow
@two_procs
def test_accelerate_launch_runs_two_processes():
    r = _two_process_result("accelerate")
    assert r["num_processes"] == 2 and r["sync"] == [False, False, False, True]
    assert r["collectives"] == [0, 0, 0, 1] and r["scheduler_steps"] == [0, 0, 0, 2]


@pytest.mark.slow
@two_procs
def test_torchrun_runs_two_processes():
    r = _two_process_result("torchrun")
    assert r["num_processes"] == 2 and r["collectives"] == [0, 0, 0, 1]


@pytest.mark.slow
def test_accelerate_launch_cpu_flag_is_caught():
    out = hf_launch.run_script(hf_launch.script_command("accelerate-cpu-trap", SCRIPT, processes=2), timeout=300)
    assert out["returncode"] != 0 and out["result"] is None
    assert "expected 2 processes, this Accelerator sees 1" in out["error"]
    assert "starts ONE process" in out["error"]


@pytest.mark.slow
@pytest.mark.skipif(cuda_count() > 0, reason="the trap is about CPU-only machines")
def test_torchrun_without_cpu_true_is_caught():
    out = hf_launch.run_script(
        hf_launch.script_command("torchrun", SCRIPT, processes=2, args=("--no-cpu",)), timeout=300
    )
    assert out["returncode"] != 0 and "trains alone" in out["error"]


def test_script_commands_read_as_typed():
    from lab_utils.launch import free_port

    cmd = hf_launch.script_command("accelerate", "job.py", processes=2, port=free_port())
    text = hf_launch.shown(cmd)
    assert text.startswith("accelerate launch --multi_gpu --num_processes 2") and "--cpu" not in text
    assert text.endswith("job.py --processes 2")
    assert hf_launch.shown(hf_launch.script_command("torchrun", "job.py")).startswith("torchrun --standalone")
    with pytest.raises(ValueError, match="launcher"):
        hf_launch.script_command("mpirun", "job.py")
    assert os.path.exists(SCRIPT)
