"""hf.guards: each launch trap becomes an error that names the fix; the talk's names fail or warn on the
pinned transformers, and the new ones work."""

from __future__ import annotations

import socket
import warnings
from types import SimpleNamespace

import pytest
from accelerate import Accelerator
from transformers import Trainer, TrainingArguments

from lab_utils import accelerate_meter
from lab_utils.labs.lab04_hf import guards
from lab_utils.labs.lab04_hf.data import build_model


def test_port_guard():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {taken} is already taken"):
            guards.check_port_free(taken)
    assert guards.check_port_free(taken) == taken  # released


def test_accelerator_guard():
    with accelerate_meter.fresh_accelerate():
        guards.check_no_accelerator()
        Accelerator(cpu=True)
        assert guards.accelerator_exists()
        with pytest.raises(RuntimeError, match="notebook_launcher refuses"):
            guards.check_no_accelerator()
    assert not guards.accelerator_exists()


def test_process_guard_explains_both_fallbacks(monkeypatch):
    alone = SimpleNamespace(num_processes=1, device="cpu")
    guards.check_processes(alone, None)
    guards.check_processes(alone, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"cpu=True"):
        guards.check_processes(alone, 2)
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(RuntimeError, match=r"--cpu --num_processes 2` starts ONE process"):
        guards.check_processes(alone, 2)


def test_the_talks_argument_names_fail_or_warn(tmp_path):
    for removed, value in (("evaluation_strategy", "epoch"), ("no_cuda", True)):
        with pytest.raises(TypeError):
            TrainingArguments(output_dir=str(tmp_path), **{removed: value})
    with pytest.warns(FutureWarning, match="activation_checkpointing"):
        TrainingArguments(output_dir=str(tmp_path), report_to="none", gradient_checkpointing=True)


def test_the_listed_renames_are_real(tmp_path):
    with pytest.warns(FutureWarning):
        TrainingArguments(output_dir=str(tmp_path), report_to="none", gradient_checkpointing_kwargs={})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrainingArguments(output_dir=str(tmp_path), report_to="none", activation_checkpointing_kwargs={})
    assert "processing_class" in Trainer.__init__.__code__.co_varnames
    model = build_model()
    for old, new in guards.TALK_TO_CURRENT.items():
        if old.startswith("is_") or old.endswith("_enable"):  # the model's methods and properties
            assert hasattr(model, old) and hasattr(model, new), (old, new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = {guards.TALK_TO_CURRENT[k]: v for k, v in (("evaluation_strategy", "epoch"), ("no_cuda", True))}
        TrainingArguments(output_dir=str(tmp_path), report_to="none", activation_checkpointing=True, **new)
