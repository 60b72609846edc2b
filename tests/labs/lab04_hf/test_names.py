"""hf.names: the talk's names fail or warn on the pinned transformers, and the new ones work."""

from __future__ import annotations

import warnings

import pytest
from transformers import Trainer, TrainingArguments

from lab_utils.labs.lab04_hf import names
from lab_utils.labs.lab04_hf.data import build_model


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
    for old, new in names.TALK_TO_CURRENT.items():
        if old.startswith("is_") or old.endswith("_enable"):  # the model's methods and properties
            assert hasattr(model, old) and hasattr(model, new), (old, new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = {names.TALK_TO_CURRENT[k]: v for k, v in (("evaluation_strategy", "epoch"), ("no_cuda", True))}
        TrainingArguments(output_dir=str(tmp_path), report_to="none", activation_checkpointing=True, **new)
