"""lab_utils.memory.gpt2_bert: the calculator on GPT-2 against the meters, on shapes it was not written for
(within 10 %). Llama: test_llama.py; what the architectures share: test_stepmem.py."""

import pytest
import torch

from lab_utils.data import lm_batch
from lab_utils.memory import stepmem
from lab_utils.memory.step import measure_anatomy
from lab_utils.models import bert_classifier, tiny_gpt2

TOL = 0.10


def _gpt2(layers, hidden, heads, batch, seq, vocab, attention, ckpt):
    model = tiny_gpt2(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=seq, vocab_size=vocab)
    model.config._attn_implementation = attention
    if ckpt:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model, lm_batch(n=batch, min_len=seq, max_len=seq, vocab_size=vocab)


def _bert(layers, hidden, heads, batch, seq, vocab, attention, ckpt):
    model = bert_classifier(n_layer=layers, hidden=hidden, n_head=heads, vocab_size=vocab, n_positions=seq)
    if ckpt:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    g = torch.Generator().manual_seed(0)
    return model, dict(input_ids=torch.randint(0, vocab, (batch, seq), generator=g), labels=torch.arange(batch) % 2)


CASES = [  # (builder, layers, hidden, heads, batch, seq, vocab, attention, checkpointing, accumulation, optimizer)
    (_gpt2, 2, 96, 6, 4, 32, 300, "eager", False, 2, "adamw"),
    (_gpt2, 2, 48, 2, 2, 96, 200, "sdpa", True, 1, "sgd_momentum"),
    # BERT against the meters: tests/labs/lab01_checkpointing/test_memory_anatomy_script.py (three setups)
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__[1:]}-{c[7]}-ckpt{c[8]}-acc{c[9]}")
def test_calculator_agrees_with_the_meters(case):
    build, layers, hidden, heads, batch, seq, vocab, attention, ckpt, acc, opt_name = case
    model, data = build(layers, hidden, heads, batch, seq, vocab, attention, ckpt)
    opt = (
        torch.optim.AdamW(model.parameters())
        if opt_name == "adamw"
        else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    )
    got = measure_anatomy(model, data, opt, accumulation=acc)
    shape = stepmem.from_hf_config(
        model.config, batch=batch, seq=seq, accumulation=acc, checkpointing=ckpt, optimizer=opt_name
    )
    want = stepmem.predict(shape)
    assert stepmem.parameters(shape) == sum(p.numel() for p in model.parameters())
    for part in ("weights", "gradients", "optimizer", "activations"):
        g, w = got.parts()[part], want.parts()[part]
        assert abs(w - g) <= TOL * g, f"{part}: predicted {w}, measured {g}"
    assert abs(want.peak - got.peak) <= TOL * got.peak, f"peak: predicted {want.peak}, measured {got.peak}"
