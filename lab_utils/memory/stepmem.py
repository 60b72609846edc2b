"""The memory of one training step, predicted from a model's config: a calculator, part by part.

    shape = stepmem.from_hf_config(model.config, batch=8, seq=64, optimizer="adamw")
    pred = stepmem.predict(shape)                    # an Anatomy: bytes of each part
    pred.parts(), pred.peak                          # {"weights": ..., ...}, their sum
    stepmem.predict(dataclasses.replace(shape, accumulation=4, checkpointing=True))

GPT-2 and BERT (lab 1), Llama-style decoders (lab 8: ``stepmem_llama``; ``bf16``: autocast over
fp32 master weights, its bf16 weight copies kept for backward). The parts of forward, backward and
``optimizer.step()``: weights and gradients (one copy each), optimizer state (AdamW two moments,
SGD+momentum one), activations per micro-batch (op by op, ``layer_activation_bytes``; with
checkpointing each layer's input) and temporaries, a *model*: the larger of the loss's gradient
and one MLP hidden gradient, or the optimizer's own buffers less the freed activations.
Left out: the CUDA context (~1.3 GB, seen by NVML only), the caching allocator's reserve and
workspaces, so a driver's number is above ``peak``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lab_utils.memory import llama

__all__ = [
    "Shape",
    "Anatomy",
    "from_hf_config",
    "parameters",
    "layer_parameters",
    "layer_activation_bytes",
    "activation_bytes",
    "predict",
    "PUBLISHED",
    "ARCHS",
    "PRECISIONS",
]

ARCHS = ("gpt2", "bert", "llama")
PRECISIONS = ("fp32", "bf16")  # bf16: autocast to bf16, fp32 master weights and optimizer state
ATTENTIONS = ("eager", "sdpa")
OPTIMIZERS = ("adamw", "sgd_momentum", "sgd")

# The table of the 2022 Hugging Face guide "efficient training on a single GPU"
# (bert-large-uncased, one V100 16 GB, fp32, AdamW, 512 random sequences of 512 tokens),
# memory as the driver reports it (NVML "used", MiB, CUDA context included). Published, not run here.
PUBLISHED = [
    dict(name="batch 4", batch=4, accumulation=1, checkpointing=False, seconds=57.82, samples_per_s=8.86, mib=14949),
    dict(name="batch 1 x 4", batch=4, accumulation=4, checkpointing=False, seconds=66.03, samples_per_s=7.75, mib=8681),
    dict(
        name="1 x 4 + checkpointing",
        batch=4,
        accumulation=4,
        checkpointing=True,
        seconds=85.47,
        samples_per_s=5.99,
        mib=6775,
    ),
]


@dataclass(frozen=True)
class Shape:
    """What the calculator needs. ``batch`` is the whole batch of one optimizer step;
    ``accumulation`` splits it into micro-batches. ``mask_bytes``: bytes of one dropout-mask
    element (4 on CPU, where dropout keeps a float mask; 1 on CUDA, a bool mask)."""

    arch: str
    layers: int
    hidden: int
    heads: int
    seq: int
    batch: int
    vocab: int
    positions: int
    ffn: int = 0  # 0: 4 * hidden
    dtype_bytes: int = 4
    optimizer: str = "adamw"
    foreach: bool = True  # torch's default on one device; the 2022 guide's AdamW looped per tensor
    accumulation: int = 1
    checkpointing: bool = False
    attention: str = "eager"
    dropout: float = 0.0
    mask_bytes: int = 4
    num_labels: int = 2  # bert: a sequence classifier
    type_vocab: int = 2  # bert: token type embeddings
    kv_heads: int = 0  # llama: key/value heads of grouped-query attention (0: heads)
    tied: bool = False  # llama: LM head tied to the token embedding
    precision: str = "fp32"  # "bf16" (llama): bf16 autocast over fp32 master weights

    def __post_init__(self):
        for name, value, allowed in (
            ("arch", self.arch, ARCHS),
            ("attention", self.attention, ATTENTIONS),
            ("optimizer", self.optimizer, OPTIMIZERS),
            ("precision", self.precision, PRECISIONS),
        ):
            if value not in allowed:
                raise ValueError(f"Shape({name}={value!r}): choose one of {allowed}")
        if self.hidden % self.heads:
            raise ValueError(f"Shape(hidden={self.hidden}, heads={self.heads}): hidden must divide by heads")
        if self.heads % self.n_kv_heads:
            raise ValueError(f"Shape(heads={self.heads}, kv_heads={self.kv_heads}): heads must divide by kv_heads")
        if self.arch == "llama" and self.attention != "sdpa":
            raise ValueError(
                f"Shape(arch='llama', attention={self.attention!r}): Llama shapes are modelled with 'sdpa' only"
            )
        if self.precision == "bf16" and (self.arch != "llama" or self.dtype_bytes != 4):
            raise ValueError(
                f"Shape(precision='bf16', arch={self.arch!r}, dtype_bytes={self.dtype_bytes}): bf16 mixed precision "
                "is modelled for Llama shapes with fp32 master weights (dtype_bytes=4)"
            )
        if self.accumulation < 1 or self.batch % self.accumulation:
            raise ValueError(
                f"Shape(batch={self.batch}, accumulation={self.accumulation}): accumulation must be >= 1 "
                "and divide the batch into equal micro-batches"
            )
        if self.seq > self.positions:
            raise ValueError(f"Shape(seq={self.seq}) is longer than the model's positions={self.positions}")

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def micro_batch(self) -> int:
        return self.batch // self.accumulation

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads (``kv_heads``, or ``heads`` when 0)."""
        return self.kv_heads or self.heads

    @property
    def compute_bytes(self) -> int:
        """Bytes of an element the matmuls make: 2 under bf16 autocast, else ``dtype_bytes``."""
        return 2 if self.precision == "bf16" else self.dtype_bytes


@dataclass(frozen=True)
class Anatomy:
    """Bytes of each part of a step's memory; ``peak`` is their sum."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    temporaries: int

    def parts(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @property
    def peak(self) -> int:
        return sum(self.parts().values())


def from_hf_config(config, *, batch: int, seq: int, **overrides) -> Shape:
    """A Shape from a transformers ``GPT2Config``, ``BertConfig`` or ``LlamaConfig`` (dropout and
    attention as the config says; ``overrides`` set any other field, e.g. ``optimizer``,
    ``accumulation``, ``precision``).

    >>> from_hf_config(tiny_gpt2().config, batch=8, seq=64).layers
    2
    """
    kind = config.model_type
    attention = getattr(config, "_attn_implementation", None) or ("sdpa" if kind == "llama" else "eager")
    if kind == "gpt2":
        fields = dict(
            arch="gpt2",
            layers=config.n_layer,
            hidden=config.n_embd,
            heads=config.n_head,
            vocab=config.vocab_size,
            positions=config.n_positions,
            ffn=config.n_inner or 0,
            dropout=max(config.attn_pdrop, config.resid_pdrop, config.embd_pdrop),
        )
    elif kind == "bert":
        fields = dict(
            arch="bert",
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            heads=config.num_attention_heads,
            vocab=config.vocab_size,
            positions=config.max_position_embeddings,
            ffn=config.intermediate_size,
            dropout=max(config.hidden_dropout_prob, config.attention_probs_dropout_prob),
            num_labels=config.num_labels,
            type_vocab=config.type_vocab_size,
        )
    elif kind == "llama":
        fields = llama.llama_fields(config)
    else:
        raise ValueError(
            f"from_hf_config: model_type {kind!r} is not modelled; give a GPT2Config, a BertConfig or a LlamaConfig"
        )
    fields.update(attention=attention if attention in ATTENTIONS else "sdpa", batch=batch, seq=seq)
    fields.update(overrides)
    return Shape(**fields)


def layer_parameters(s: Shape) -> int:
    """Parameters of one layer: attention's four projections, the MLP's two, two LayerNorms."""
    if s.arch == "llama":
        return llama.layer_parameters(s)
    h, f = s.hidden, s.ffn_size
    return (4 * h * h + 4 * h) + (2 * h * f + f + h) + 4 * h


def parameters(s: Shape) -> int:
    """Number of parameters (GPT-2: LM head tied to the token embedding; BERT: with pooler and
    classifier)."""
    if s.arch == "llama":
        return llama.parameters(s)
    h, layers = s.hidden, s.layers * layer_parameters(s)
    if s.arch == "gpt2":
        return s.vocab * h + s.positions * h + layers + 2 * h
    embed = (s.vocab + s.positions + s.type_vocab) * h + 2 * h
    return embed + layers + h * h + h + h * s.num_labels + s.num_labels


def layer_activation_bytes(s: Shape, batch: int | None = None) -> int:
    """Bytes one layer keeps for backward on ``batch`` sequences (default: the micro-batch), op by
    op, in u = batch * seq * hidden elements and p = one score tensor (batch * heads * seq^2):

    - both: q/k/v's input, q, k, v, the out-projection's, second LayerNorm's and MLP's inputs
      (7u), the second matmul's input (4u), two LayerNorms' mean and 1/std;
    - eager attention: the softmax output (p), with dropout its mask and output (2p); sdpa only its
      output (1u, in GPT-2 shared with the projection's input) and a log-sum-exp per row and head;
    - GPT-2: the first LayerNorm's input (1u), ``gelu_new``'s four Python-op tensors (16u); BERT:
      the output LayerNorm's input (1u), GELU's input (4u); each dropout a mask (1u at ``mask_bytes``).
    """
    b = s.micro_batch if batch is None else batch
    if s.arch == "llama":
        return llama.layer_activation_bytes(s, b)
    u = b * s.seq * s.hidden
    e, m = s.dtype_bytes, s.mask_bytes
    ratio = s.ffn_size / s.hidden
    scores = b * s.heads * s.seq * s.seq
    drop = s.dropout > 0
    n = (1 + 3 + 1 + 1 + 1 + ratio) * u * e + 4 * b * s.seq * 4
    if s.attention == "eager":
        n += scores * e + (scores * (e + m) if drop else 0)
    else:
        n += b * s.heads * s.seq * 4 + (u * e if s.arch == "bert" else 0)
    if s.arch == "gpt2":
        n += u * e + 4 * ratio * u * e
    else:
        n += u * e + ratio * u * e  # post-LN: the output LayerNorm's input; GELU's input
    if drop:
        n += 2 * u * m
    return int(n)


def _outside_layers_bytes(s: Shape, b: int) -> int:
    """What the embeddings and the head keep: GPT-2's final LayerNorm and LM head (the
    log-softmax of the logits, the int64 targets); BERT's embedding LayerNorm (and dropout), the
    pooler and the classifier (small)."""
    if s.arch == "llama":
        return llama.outside_layers_bytes(s, b)
    u = b * s.seq * s.hidden * s.dtype_bytes
    stats = 2 * b * s.seq * 4
    if s.arch == "gpt2":
        emb = s.seq * 8 + (u * s.mask_bytes // s.dtype_bytes if s.dropout > 0 else 0)
        return emb + 2 * u + stats + b * s.seq * s.vocab * s.dtype_bytes + b * s.seq * 8
    emb = s.seq * 8 + b * s.seq * 8  # position ids, token type ids (int64)
    emb += u + stats + (u * s.mask_bytes // s.dtype_bytes if s.dropout > 0 else 0)
    # the pooler's input is a view of the last hidden states (their whole storage), then tanh's
    # output, dropout's mask and output (the classifier's input), the log-softmax
    bh = b * s.hidden
    head = u + bh * s.dtype_bytes + (bh * (s.mask_bytes + s.dtype_bytes) if s.dropout > 0 else 0)
    head += b * s.num_labels * s.dtype_bytes
    return emb + head


def activation_bytes(s: Shape) -> int:
    """Bytes kept for backward over one micro-batch's forward: every layer's activations, or with
    checkpointing only every layer's input, plus what the embeddings and the head keep."""
    b = s.micro_batch
    if s.checkpointing:  # each layer's input; GPT-2's eager attention's float mask, an input too, once
        layers = s.layers * b * s.seq * s.hidden * s.dtype_bytes
        layers += b * s.seq * s.seq * s.dtype_bytes if s.attention == "eager" and s.arch == "gpt2" else 0
    else:
        layers = s.layers * layer_activation_bytes(s, b)
    return layers + _outside_layers_bytes(s, b)


def predict(s: Shape) -> Anatomy:
    """Predict each part of the step's memory (see the module docstring for what is modelled)."""
    n = parameters(s)
    w = n * s.dtype_bytes
    states = {"adamw": 2, "sgd_momentum": 1, "sgd": 0}[s.optimizer]
    n_tensors = {"gpt2": 4 + 16 * s.layers, "bert": 8 + 16 * s.layers, "llama": llama.n_tensors(s)}[s.arch]
    opt = states * w + (n_tensors * 4 if s.optimizer == "adamw" else 0)  # AdamW's step counts
    act = activation_bytes(s)
    b = s.micro_batch
    if s.arch == "llama":
        return Anatomy(w, w, opt, act, llama.temporaries(s, b, w if states and s.foreach else 0, act))
    logits = b * s.seq * (s.vocab if s.arch == "gpt2" else 0) * s.dtype_bytes
    # backward's working set: the loss's gradient (two logits-sized tensors) first, later one
    # MLP hidden gradient, with checkpointing next to the layer being rebuilt
    layer = b * s.seq * s.ffn_size * s.dtype_bytes + (layer_activation_bytes(s, b) if s.checkpointing else 0)
    bwd = max(2 * logits, layer)
    largest = max(s.vocab, s.positions, s.ffn_size) * s.hidden * s.dtype_bytes
    opt_tmp = (w if s.foreach else 2 * largest) if states else 0
    return Anatomy(w, w, opt, act, max(bwd, opt_tmp - act))
