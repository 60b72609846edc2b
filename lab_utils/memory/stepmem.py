"""The memory of one training step, predicted from a model's config: a calculator, part by part.

    shape = stepmem.from_hf_config(model.config, batch=8, seq=64, optimizer="adamw")
    pred = stepmem.predict(shape)                    # an Anatomy: bytes of each part
    pred.parts(), pred.peak                          # {"weights": ..., ...}, their sum
    stepmem.predict(dataclasses.replace(shape, accumulation=4, checkpointing=True))

GPT-2 and BERT (lab 1: ``gpt2_bert``), Llama-style decoders (lab 8: ``llama``; ``bf16``: autocast
over fp32 master weights, its bf16 weight copies kept for backward); this module holds what they
share and dispatches on ``Shape.arch``. The parts of forward, backward and ``optimizer.step()``:
weights and gradients (one copy each), optimizer state (AdamW two moments, SGD+momentum one),
activations per micro-batch (op by op, ``layer_activation_bytes``; with checkpointing each layer's
input) and temporaries, a *model*: the larger of the loss's gradient and one MLP hidden gradient,
or the optimizer's own buffers less the freed activations.
Left out: the CUDA context (~1.3 GB, seen by NVML only), the caching allocator's reserve and
workspaces, so a driver's number is above ``peak``.
"""

from __future__ import annotations

from types import ModuleType

from lab_utils.memory import gpt2_bert, llama
from lab_utils.memory.gpt2_bert import PUBLISHED
from lab_utils.memory.shape import ARCHS, ATTENTIONS, OPTIMIZERS, PRECISIONS, Anatomy, Shape

__all__ = [
    "Shape",
    "Anatomy",
    "from_hf_config",
    "parameters",
    "layer_parameters",
    "layer_activation_bytes",
    "activation_bytes",
    "temporaries",
    "predict",
    "PUBLISHED",
    "ARCHS",
    "PRECISIONS",
    "OPTIMIZERS",
]


def _arch(s: Shape) -> ModuleType:
    """The module that counts ``s``'s architecture."""
    return llama if s.arch == "llama" else gpt2_bert


def from_hf_config(config, *, batch: int, seq: int, **overrides) -> Shape:
    """A Shape from a transformers ``GPT2Config``, ``BertConfig`` or ``LlamaConfig`` (dropout and
    attention as the config says; a config that sets no attention gets sdpa, what transformers
    picks for these models; ``overrides`` set any other field, e.g. ``optimizer``,
    ``accumulation``, ``precision``).

    >>> from_hf_config(tiny_gpt2().config, batch=8, seq=64).layers
    2
    """
    kind = config.model_type
    attention = getattr(config, "_attn_implementation", None) or "sdpa"
    if kind in ("gpt2", "bert"):
        fields = gpt2_bert.fields(config)
    elif kind == "llama":
        fields = llama.fields(config)
    else:
        raise ValueError(
            f"from_hf_config: model_type {kind!r} is not modelled; give a GPT2Config, a BertConfig or a LlamaConfig"
        )
    fields.update(attention=attention if attention in ATTENTIONS else "sdpa", batch=batch, seq=seq)
    fields.update(overrides)
    return Shape(**fields)


def layer_parameters(s: Shape) -> int:
    """Parameters of one layer (attention, MLP, norms)."""
    return _arch(s).layer_parameters(s)


def parameters(s: Shape) -> int:
    """Number of parameters (GPT-2: LM head tied to the token embedding; BERT: with pooler and
    classifier; Llama: head tied if ``s.tied``)."""
    return _arch(s).parameters(s)


def layer_activation_bytes(s: Shape, batch: int | None = None) -> int:
    """Bytes one layer keeps for backward on ``batch`` sequences (default: the micro-batch), op by
    op (``gpt2_bert.layer_activation_bytes``, ``llama.layer_activation_bytes``)."""
    return _arch(s).layer_activation_bytes(s, s.micro_batch if batch is None else batch)


def activation_bytes(s: Shape) -> int:
    """Bytes kept for backward over one micro-batch's forward: every layer's activations, or with
    checkpointing only every layer's input, plus what the embeddings and the head keep."""
    b = s.micro_batch
    if s.checkpointing:  # each layer's input
        layers = s.layers * b * s.seq * s.hidden * s.dtype_bytes
    else:
        layers = s.layers * layer_activation_bytes(s, b)
    return layers + _arch(s).outside_layers_bytes(s, b)


def temporaries(s: Shape, act: int | None = None, *, stepped: int | None = None, loss: bool = True) -> int:
    """The temporaries of ``s``'s step above ``act`` bytes of activations (default the step's own):
    ``stepped``, the parameters the optimizer steps on this device (default all: a ZeRO/FSDP rank
    steps its shard, a pipeline stage its layers); ``loss=False`` for a device that computes no loss."""
    act = activation_bytes(s) if act is None else act
    return _arch(s).temporaries(s, s.micro_batch, act, stepped=stepped, loss=loss)


def predict(s: Shape) -> Anatomy:
    """Predict each part of the step's memory (see the module docstring for what is modelled)."""
    arch = _arch(s)
    w = arch.parameters(s) * s.dtype_bytes
    opt = s.optimizer_states * w + (arch.n_tensors(s) * 4 if s.optimizer == "adamw" else 0)  # AdamW's step counts
    act = activation_bytes(s)
    return Anatomy(w, w, opt, act, arch.temporaries(s, s.micro_batch, act))
