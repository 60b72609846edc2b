"""`make gpu-check` (tools/gpu_check.py): a clean skip without CUDA, and its snapshot replay."""

import dataclasses

import torch

from tools import gpu_check


def test_without_cuda_it_says_so_and_exits_0(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--out", str(out)]) == 0
    assert "no CUDA device here" in capsys.readouterr().out
    assert not out.exists()


def test_the_snapshot_peak_replays_allocs_and_completed_frees():
    events = [
        dict(action="alloc", size=10),
        dict(action="free_requested", size=10),  # the block is not free until free_completed
        dict(action="alloc", size=4),
        dict(action="free_completed", size=10),
        dict(action="free_completed", size=100),  # a block allocated before the trace began
        dict(action="alloc", size=50),
    ]
    assert gpu_check.trace_peak(events) == 14


def test_the_setups_cover_each_layout_with_and_without_accumulation_and_checkpointing():
    shapes = [s for _, s in gpu_check.setups()]
    assert {s.arch for s in shapes} == {"bert", "llama"}
    for arch, precision in (("bert", "fp32"), ("llama", "fp32"), ("llama", "bf16")):
        runs = {(s.accumulation > 1, s.checkpointing) for s in shapes if (s.arch, s.precision) == (arch, precision)}
        assert {(False, False), (True, False), (True, True)} <= runs


def test_one_run_reports_both_peaks_beside_the_prediction(monkeypatch):
    # the CUDA-only meter replaced by a plain step, so the rest of a run is exercised on the CPU
    monkeypatch.setattr(gpu_check, "snapshot_peak", lambda step, device: step() or 1)
    shape = next(s for label, s in gpu_check.setups() if s.arch == "llama")
    tiny = dataclasses.replace(shape, layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256, seq=16, batch=4)
    row = gpu_check.run("tiny", tiny, torch.device("cpu"))
    assert row["snapshot_peak"] == sum(row["measured"][k] for k in ("weights", "gradients", "optimizer")) + 1
    assert abs(row["error_vs_allocated"]) < 0.10
    assert set(row["predicted"]) == set(row["measured"])


def test_fp32_grouped_query_rows_expect_the_math_kernels_probabilities():
    by_label = dict(gpu_check.setups())
    # 16 layers x 4 sequences x 32 heads x 2048^2 fp32 probabilities: 32 GiB; one layer's with checkpointing
    assert gpu_check.math_attention_bytes(by_label["llama-3.2-1b fp32 K=1"]) == 32 * 2**30
    assert gpu_check.math_attention_bytes(by_label["llama-3.2-1b fp32 K=1 ckpt"]) == 2 * 2**30
    assert gpu_check.math_attention_bytes(by_label["llama-3.2-1b bf16 K=1"]) == 0
