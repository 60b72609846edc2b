"""lab_utils.memory.llama: the calculator on Llama-style decoders (fp32 and bf16 autocast) against the
meters, on shapes neither the calculator's fit nor lab 8 uses (peak within 5 %, each measured part exact
or within 1 %). GPT-2 and BERT: test_gpt2_bert.py; what the architectures share: test_stepmem.py. A
fresh process's own peak (VmHWM) against the calculator: lab 8's "Going further" (run by the suite
under nbval)."""

import dataclasses

import pytest

from lab_utils.labs.lab08_capstone import measure
from lab_utils.memory import stepmem
from lab_utils.memory.llama import autocast_weight_copies

BASE = stepmem.Shape(
    arch="llama", layers=2, hidden=72, heads=6, kv_heads=3, seq=36, batch=4, vocab=900, positions=64, ffn=200,
    attention="sdpa",
)  # fmt: skip

CASES = {
    "fp32": dict(),
    "bf16-acc2": dict(precision="bf16", accumulation=2),
    "bf16-ckpt-small-vocab": dict(precision="bf16", checkpointing=True, vocab=80, ffn=400),
    "fp32-ckpt-mha-sgd": dict(checkpointing=True, kv_heads=6, optimizer="sgd_momentum"),
}


@pytest.mark.parametrize("name", CASES)
def test_llama_calculator_agrees_with_the_meters(name):
    s = dataclasses.replace(BASE, **CASES[name])
    got, want = measure.step_parts(s), stepmem.predict(s)
    for part in ("weights", "gradients", "optimizer", "activations"):
        g, w = got.parts()[part], want.parts()[part]
        assert abs(w - g) <= 0.01 * g, f"{part}: predicted {w}, measured {g}"
    assert abs(want.peak - got.peak) <= 0.05 * got.peak, f"peak: predicted {want.peak}, measured {got.peak}"


def test_from_a_llama_config_counts_the_models_parameters():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=120, hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    s = stepmem.from_hf_config(cfg, batch=2, seq=16)
    assert (s.arch, s.attention, s.kv_heads, s.tied) == ("llama", "sdpa", 2, False)
    assert stepmem.parameters(s) == sum(p.numel() for p in LlamaForCausalLM(cfg).parameters())
    tied = stepmem.from_hf_config(LlamaConfig(**{**cfg.to_dict(), "tie_word_embeddings": True}), batch=2, seq=16)
    assert stepmem.parameters(s) - stepmem.parameters(tied) == 120 * 48


def test_bf16_keeps_fp32_state_and_bf16_copies_of_the_matmul_weights():
    fp32, bf16 = stepmem.predict(BASE), stepmem.predict(dataclasses.replace(BASE, precision="bf16"))
    assert (fp32.weights, fp32.gradients, fp32.optimizer) == (bf16.weights, bf16.gradients, bf16.optimizer)
    n = stepmem.parameters(BASE)
    norms_and_embedding = BASE.layers * 2 * BASE.hidden + BASE.hidden + BASE.vocab * BASE.hidden
    assert autocast_weight_copies(dataclasses.replace(BASE, precision="bf16")) == 2 * (n - norms_and_embedding)
    assert autocast_weight_copies(BASE) == 0


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(precision="fp16"), "precision"),
        (dict(kv_heads=4), "kv_heads"),
        (dict(attention="eager"), "sdpa"),
        (dict(dropout=0.1), "without attention dropout"),
        (dict(arch="gpt2", precision="bf16"), "bf16 mixed precision"),
    ],
)
def test_bad_llama_shapes_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(BASE, **bad)


def test_asking_for_cuda_without_one_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="no CUDA device here"):
        measure.step_parts(BASE, device="cuda")
