"""hf.names: the talk's names map to ones the pinned transformers accepts without a warning."""

from __future__ import annotations

import warnings

import pytest
from transformers import TrainingArguments

from lab_utils.topics.hf import names


def test_current_names_give_warning_free_training_args(tmp_path):
    talk = dict(evaluation_strategy="epoch", gradient_checkpointing=True, no_cuda=True)
    new = names.current_names(**talk)
    assert new == {"eval_strategy": "epoch", "activation_checkpointing": True, "use_cpu": True}
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
        names.current_names(gradient_checkpointing=True, activation_checkpointing=True)
