"""A scaled-down plan, run for real here: a model built offline from a ``Shape`` (Llama, GPT-2, BERT).

    got = measure.step_parts(shape)      # a stepmem.Anatomy, measured (bf16 autocast if the shape says so)
    measure.process_peak(shape)          # bytes: VmHWM of a fresh process, less its start

``process_peak`` needs no torch meter: a child with ``MALLOC_MMAP_THRESHOLD_=65536`` (freed
tensors go back to the kernel) resets its peak via ``/proc/self/clear_refs`` after a first step
and reads ``VmHWM`` after a second; Linux only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict

import torch
from torch import nn

from lab_utils.memory.step import measure_anatomy, stepper
from lab_utils.memory.stepmem import Anatomy, Shape

__all__ = ["build", "step_parts", "process_peak"]


def build(shape: Shape, device: str = "cpu") -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A model of ``shape`` (random weights, no download) and a batch of ``shape.batch`` random
    sequences of ``shape.seq`` tokens: a ``LlamaForCausalLM`` (sdpa) or a ``GPT2LMHeadModel``
    (labels = inputs), or a ``BertForSequenceClassification`` (a label per sequence), with the
    shape's attention, dropout and checkpointing; built on ``device`` (the batch drawn on the CPU)."""
    torch.manual_seed(0)
    with torch.device(device):
        model = _model(shape)
    if shape.checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, shape.vocab, (shape.batch, shape.seq), generator=g)
    labels = torch.arange(shape.batch) % shape.num_labels if shape.arch == "bert" else ids
    return model, {"input_ids": ids.to(device), "labels": labels.to(device)}


def _model(shape: Shape) -> nn.Module:
    import transformers as tf

    if shape.arch == "llama":
        cfg = tf.LlamaConfig(
            vocab_size=shape.vocab,
            hidden_size=shape.hidden,
            intermediate_size=shape.ffn_size,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            num_key_value_heads=shape.n_kv_heads,
            max_position_embeddings=shape.positions,
            tie_word_embeddings=shape.tied,
            attention_dropout=shape.dropout,
            use_cache=False,
            attn_implementation="sdpa",
        )
        model = tf.LlamaForCausalLM(cfg)
    elif shape.arch == "gpt2":
        cfg = tf.GPT2Config(
            vocab_size=shape.vocab,
            n_positions=shape.positions,
            n_embd=shape.hidden,
            n_layer=shape.layers,
            n_head=shape.heads,
            n_inner=shape.ffn or None,
            resid_pdrop=shape.dropout,
            embd_pdrop=shape.dropout,
            attn_pdrop=shape.dropout,
            bos_token_id=shape.vocab - 1,
            eos_token_id=shape.vocab - 1,
            use_cache=False,
        )
        cfg._attn_implementation = shape.attention
        model = tf.GPT2LMHeadModel(cfg)
    else:
        cfg = tf.BertConfig(
            vocab_size=shape.vocab,
            hidden_size=shape.hidden,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            intermediate_size=shape.ffn_size,
            max_position_embeddings=shape.positions,
            type_vocab_size=shape.type_vocab,
            hidden_dropout_prob=shape.dropout,
            attention_probs_dropout_prob=shape.dropout,
            num_labels=shape.num_labels,
            use_cache=False,
        )
        cfg._attn_implementation = shape.attention
        return tf.BertForSequenceClassification(cfg)
    model.loss_type = "ForCausalLM"
    return model


def _optimizer(shape: Shape, model: nn.Module) -> torch.optim.Optimizer:
    if shape.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=shape.foreach)
    momentum = 0.9 if shape.optimizer == "sgd_momentum" else 0.0
    return torch.optim.SGD(model.parameters(), lr=1e-3, momentum=momentum, foreach=shape.foreach)


def _cast(shape: Shape, model: nn.Module) -> Callable[[], contextlib.AbstractContextManager]:
    if shape.precision != "bf16":
        return contextlib.nullcontext
    return lambda: torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16)


def _stepper(shape: Shape, model: nn.Module, batch: dict[str, torch.Tensor]) -> Callable[[], None]:
    opt = _optimizer(shape, model)
    return stepper(model, batch, opt, accumulation=shape.accumulation, autocast=_cast(shape, model))[2]


def step_parts(shape: Shape, *, device: str = "cpu") -> Anatomy:
    """One step of a model of ``shape`` measured part by part (``measure_anatomy``, bf16 autocast if
    the shape says so): the CPU profiler's peak, or CUDA's with ``device="cuda"``."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"step_parts(device={device!r}): no CUDA device here; use device='cpu'")
    model, batch = build(shape, device)
    opt = _optimizer(shape, model)
    return measure_anatomy(model, batch, opt, accumulation=shape.accumulation, autocast=_cast(shape, model))


def _vm(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _child(shape_json: str) -> None:
    """In the fresh process: build, one step, reset the peak, one measured step; print JSON."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    shape = Shape(**json.loads(shape_json))
    # Load the code a step runs (transformers' Llama, autocast's and the optimizer's kernels) on a
    # tiny model first: the process before the model exists includes it, as a training job would.
    g = shape.heads // shape.n_kv_heads
    tiny = dataclasses.replace(shape, layers=1, hidden=8 * g, heads=g, kv_heads=1,
                               ffn=32, vocab=32, seq=8, batch=shape.accumulation)  # fmt: skip
    model, batch = build(tiny)
    _stepper(tiny, model, batch)()
    del model, batch
    gc.collect()
    before = _vm("VmRSS")
    model, batch = build(shape)
    model.train()
    step = _stepper(shape, model, batch)
    step()
    start = _vm("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    step()
    print(json.dumps(dict(before=before, start=start, hwm=_vm("VmHWM"))))


def process_peak(shape: Shape, *, timeout_s: float = 600) -> dict[str, int]:
    """One step of ``shape`` in a fresh Python, its peak resident memory (Linux), in bytes:
    ``before`` (no model yet), ``start`` (after a first step) and ``hwm``; ``hwm - before`` is
    what the calculator's ``peak`` predicts."""
    if not os.path.exists("/proc/self/clear_refs"):
        raise RuntimeError("process_peak: needs Linux's /proc/self/clear_refs and VmHWM")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    code = f"from lab_utils.labs.lab08_capstone.measure import _child; _child({json.dumps(json.dumps(asdict(shape)))})"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if out.returncode:
        raise RuntimeError(f"process_peak: the child failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
