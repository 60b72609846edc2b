"""The step-memory calculator's GPT-2 and BERT (lab 1; ``stepmem`` dispatches here for
``arch="gpt2"`` and ``arch="bert"``), counted op by op from what autograd saves (checked against
the meters), in u = batch * seq * hidden elements and p = one score tensor (batch * heads * seq^2).

Each function takes the ``Shape`` and, for activations, ``b`` the sequences of one micro-batch.
``PUBLISHED`` is the 2022 Hugging Face guide's table (BERT-large) that lab 1 compares with.
"""

from __future__ import annotations

from lab_utils.memory.shape import Shape

__all__ = [
    "fields",
    "parameters",
    "layer_parameters",
    "layer_activation_bytes",
    "outside_layers_bytes",
    "n_tensors",
    "temporaries",
    "PUBLISHED",
]

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


def fields(config) -> dict:
    """Shape fields from a transformers ``GPT2Config`` or ``BertConfig`` (dropout the largest the
    config names)."""
    if config.model_type == "gpt2":
        return dict(
            arch="gpt2",
            layers=config.n_layer,
            hidden=config.n_embd,
            heads=config.n_head,
            vocab=config.vocab_size,
            positions=config.n_positions,
            ffn=config.n_inner or 0,
            dropout=max(config.attn_pdrop, config.resid_pdrop, config.embd_pdrop),
        )
    return dict(
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


def layer_parameters(s: Shape) -> int:
    """Parameters of one layer: attention's four projections, the MLP's two, two LayerNorms."""
    h, f = s.hidden, s.ffn_size
    return (4 * h * h + 4 * h) + (2 * h * f + f + h) + 4 * h


def parameters(s: Shape) -> int:
    """Number of parameters (GPT-2: LM head tied to the token embedding; BERT: with pooler and
    classifier)."""
    h, layers = s.hidden, s.layers * layer_parameters(s)
    if s.arch == "gpt2":
        return s.vocab * h + s.positions * h + layers + 2 * h
    embed = (s.vocab + s.positions + s.type_vocab) * h + 2 * h
    return embed + layers + h * h + h + h * s.num_labels + s.num_labels


def n_tensors(s: Shape) -> int:
    """Parameter tensors (AdamW keeps a step count each): 16 per layer, 4 (GPT-2) or 8 (BERT) outside."""
    return (4 if s.arch == "gpt2" else 8) + 16 * s.layers


def layer_activation_bytes(s: Shape, b: int) -> int:
    """Bytes one layer keeps for backward on ``b`` sequences, op by op:

    - both: q/k/v's input, q, k, v, the out-projection's, second LayerNorm's and MLP's inputs
      (7u), the second matmul's input (4u), two LayerNorms' mean and 1/std;
    - eager attention: the softmax output (p), with dropout its mask and output (2p); sdpa only its
      output (1u, in GPT-2 shared with the projection's input) and a log-sum-exp per row and head;
    - GPT-2: the first LayerNorm's input (1u), ``gelu_new``'s four Python-op tensors (16u); BERT:
      the output LayerNorm's input (1u), GELU's input (4u); each dropout a mask (1u at ``mask_bytes``).
    """
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


def outside_layers_bytes(s: Shape, b: int) -> int:
    """What the embeddings and the head keep: GPT-2's final LayerNorm and LM head (the
    log-softmax of the logits, the int64 targets), with checkpointing and eager attention its
    float mask (every rebuilt layer's input, one tensor); BERT's embedding LayerNorm (and
    dropout), the pooler and the classifier (small)."""
    u = b * s.seq * s.hidden * s.dtype_bytes
    stats = 2 * b * s.seq * 4
    if s.arch == "gpt2":
        emb = s.seq * 8 + (u * s.mask_bytes // s.dtype_bytes if s.dropout > 0 else 0)
        mask = b * s.seq * s.seq * s.dtype_bytes if s.checkpointing and s.attention == "eager" else 0
        return emb + 2 * u + stats + b * s.seq * s.vocab * s.dtype_bytes + b * s.seq * 8 + mask
    emb = s.seq * 8 + b * s.seq * 8  # position ids, token type ids (int64)
    emb += u + stats + (u * s.mask_bytes // s.dtype_bytes if s.dropout > 0 else 0)
    # the pooler's input is a view of the last hidden states (their whole storage), then tanh's
    # output, dropout's mask and output (the classifier's input), the log-softmax
    bh = b * s.hidden
    head = u + bh * s.dtype_bytes + (bh * (s.mask_bytes + s.dtype_bytes) if s.dropout > 0 else 0)
    head += b * s.num_labels * s.dtype_bytes
    return emb + head


def temporaries(s: Shape, b: int, act: int, *, stepped: int | None = None, loss: bool = True) -> int:
    """The peak above weights, gradients, optimizer state and activations (``act``), a *model*:
    backward's working set, the loss's gradient (two logits-sized tensors) first, later one MLP
    hidden gradient (with checkpointing next to the layer being rebuilt); or the optimizer's own
    buffers (foreach: one tensor per parameter it steps, ``stepped``, default all; per tensor: two
    of the largest) less the freed activations. ``loss=False``: a device that computes no loss."""
    logits = b * s.seq * (s.vocab if s.arch == "gpt2" and loss else 0) * s.dtype_bytes
    layer = b * s.seq * s.ffn_size * s.dtype_bytes + (layer_activation_bytes(s, b) if s.checkpointing else 0)
    bwd = max(2 * logits, layer)
    largest = max(s.vocab, s.positions, s.ffn_size) * s.hidden * s.dtype_bytes
    stepped = parameters(s) if stepped is None else stepped
    opt_tmp = (stepped * s.dtype_bytes if s.foreach else 2 * largest) if s.optimizer_states else 0
    return max(bwd, opt_tmp - act)
