"""labs/01_gradient_checkpointing/scripts/memory_anatomy.py: its CPU variant (tiny BERT) runs
in-process and agrees with the calculator; a part off by more than 10 % fails it; asking for CUDA
without one is a clear error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from lab_utils.memory.stepmem import Anatomy

SCRIPT = Path(__file__).resolve().parents[3] / "labs" / "01_gradient_checkpointing" / "scripts" / "memory_anatomy.py"


def _load():
    spec = importlib.util.spec_from_file_location("memory_anatomy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU variant; on a GPU the script runs bert-large")
def test_cpu_variant_agrees_with_the_calculator(capsys):
    rc = _load().main(["--device", "cpu", "--steps", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "CUDA part skipped" in out and "all parts within 10% of the calculator" in out
    for setup in ("batch 4 x 1", "batch 1 x 4", "batch 1 x 4 + checkpointing"):
        assert f"\n{setup}: " in out
    assert "PUBLISHED" not in out  # the published numbers are bert-large's: not beside a tiny model


def test_a_part_off_by_more_than_ten_percent_is_reported():
    mod = _load()
    measured = Anatomy(weights=100, gradients=100, optimizer=200, activations=1000, temporaries=50)
    predicted = Anatomy(weights=100, gradients=100, optimizer=200, activations=1200, temporaries=50)
    bad = mod.report("x", dict(measured=measured, predicted=predicted, seconds_per_sample=0.1), None)
    assert len(bad) == 2 and "activations" in bad[0] and "peak" in bad[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as exc:
        _load().main(["--device", "cuda"])
    assert exc.value.code == 2 and "no CUDA device here" in capsys.readouterr().err
