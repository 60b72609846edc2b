"""lab_utils.memory.stepmem, what every architecture shares: accumulation, checkpointing, the Shape's
checks. Against the meters: test_gpt2_bert.py (GPT-2, BERT) and test_llama.py (Llama)."""

import dataclasses

import pytest

from lab_utils.memory import stepmem


def test_accumulation_divides_activations_not_model_state():
    s = stepmem.Shape(arch="bert", layers=4, hidden=64, heads=4, seq=64, batch=8, vocab=100, positions=64)
    one, four = stepmem.predict(s), stepmem.predict(dataclasses.replace(s, accumulation=4))
    assert one.weights + one.gradients + one.optimizer == four.weights + four.gradients + four.optimizer
    assert 3.5 < one.activations / four.activations <= 4.0


def test_checkpointing_keeps_one_input_per_layer():
    s = stepmem.Shape(arch="bert", layers=6, hidden=32, heads=2, seq=16, batch=2, vocab=50, positions=16)
    full, ckpt = stepmem.activation_bytes(s), stepmem.activation_bytes(dataclasses.replace(s, checkpointing=True))
    per_input = 2 * 16 * 32 * 4
    outside = full - 6 * stepmem.layer_activation_bytes(s)
    assert ckpt == outside + 6 * per_input


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(arch="llama"), "arch"),
        (dict(heads=5), "divide by heads"),
        (dict(accumulation=3), "accumulation"),
        (dict(seq=999), "positions"),
        (dict(optimizer="lion"), "optimizer"),
    ],
)
def test_bad_shapes_are_refused(bad, match):
    fields = dict(arch="gpt2", layers=2, hidden=64, heads=4, seq=32, batch=4, vocab=100, positions=64) | bad
    with pytest.raises(ValueError, match=match):
        stepmem.Shape(**fields)
