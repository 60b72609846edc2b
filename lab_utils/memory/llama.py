"""The step-memory calculator's Llama-style decoder (``stepmem`` dispatches here for ``arch="llama"``).

A ``LlamaDecoderLayer`` with sdpa, counted tensor by tensor from what autograd saves (checked
against ``SavedTensorMeter``); u = batch * seq * hidden elements, r = kv_heads / heads, F = ffn /
hidden, e = the master dtype's bytes, c = the matmuls' (2 under bf16 autocast, else e):

- two RMSNorms in fp32 on the residual stream: input and normalised tensor (2u at e), 1/rms;
- projection inputs: 2u at e without autocast; under autocast each of q, k, v, gate, up casts its
  own bf16 copy (5u at c), and every projection weight's bf16 copy is kept (c per parameter);
- sdpa: q, k, v after rotary ((1 + 2r)u at c), its output (1u at c), a log-sum-exp per row/head
  (a fused kernel's; on CUDA in fp32 with r < 1 and no mask, sdpa runs the math kernel, which also
  keeps the heads x seq^2 probabilities: not counted, ``plan.report.left_out`` sizes it);
- SwiGLU: silu's input and output, up's output, down's input (4F u at c).

Outside the layers: rotary cos/sin (not with checkpointing), the final RMSNorm, the head's input,
the loss's fp32 log-softmax (transformers upcasts the logits) and the int64 labels.
"""

from __future__ import annotations

from lab_utils.memory.shape import Shape

__all__ = [
    "fields",
    "parameters",
    "layer_parameters",
    "layer_activation_bytes",
    "outside_layers_bytes",
    "autocast_weight_copies",
    "n_tensors",
    "temporaries",
]


def fields(config) -> dict:
    """Shape fields from a transformers ``LlamaConfig`` (biases, if the config asks for them, are
    not modelled: a clear error)."""
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ValueError("from_hf_config: a LlamaConfig with attention_bias or mlp_bias is not modelled")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if head_dim * config.num_attention_heads != config.hidden_size:
        raise ValueError(
            f"from_hf_config: head_dim={head_dim} x heads={config.num_attention_heads} != hidden="
            f"{config.hidden_size}; only head_dim = hidden / heads is modelled"
        )
    return dict(
        arch="llama",
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads or config.num_attention_heads,
        vocab=config.vocab_size,
        positions=config.max_position_embeddings,
        ffn=config.intermediate_size,
        dropout=getattr(config, "attention_dropout", 0.0),
        tied=bool(getattr(config, "tie_word_embeddings", False)),
    )


def layer_parameters(s: Shape) -> int:
    """One decoder layer: q and o (h x h), k and v (h x kv_dim), SwiGLU's three, two RMSNorms."""
    h, f, kv = s.hidden, s.ffn_size, s.hidden // s.heads * s.n_kv_heads
    return 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h


def parameters(s: Shape) -> int:
    """Embedding, layers, final RMSNorm and (untied) head."""
    return s.vocab * s.hidden * (1 if s.tied else 2) + s.layers * layer_parameters(s) + s.hidden


def n_tensors(s: Shape) -> int:
    """Parameter tensors: 9 per layer, embedding, final norm, head (AdamW keeps a step count each)."""
    return 9 * s.layers + 2 + (0 if s.tied else 1)


def autocast_weight_copies(s: Shape) -> int:
    """Bytes of the bf16 copies autocast makes of the matmuls' weights (0 without autocast)."""
    if s.precision != "bf16":
        return 0
    return s.compute_bytes * (s.layers * (layer_parameters(s) - 2 * s.hidden) + s.vocab * s.hidden)


def layer_activation_bytes(s: Shape, b: int) -> int:
    """Bytes one decoder layer keeps for backward on ``b`` sequences (see the module docstring);
    without its weight copies, which ``activation_bytes`` adds once per model."""
    u, bs = b * s.seq * s.hidden, b * s.seq
    e, c = s.dtype_bytes, s.compute_bytes
    r, ratio = s.n_kv_heads / s.heads, s.ffn_size / s.hidden
    norms = 2 * (2 * u * e + bs * 4)
    inputs = 5 * u * c if s.precision == "bf16" else 2 * u * e
    attention = (2 + 2 * r) * u * c + b * s.heads * s.seq * 4
    mlp = 4 * ratio * u * c
    return int(norms + inputs + attention + mlp)


def outside_layers_bytes(s: Shape, b: int) -> int:
    """Rotary cos/sin, final RMSNorm, the head's input, the loss's fp32 log-softmax, the labels;
    under autocast every weight copy (the layers' only without checkpointing)."""
    u, bs = b * s.seq * s.hidden, b * s.seq
    e, c = s.dtype_bytes, s.compute_bytes
    rotary = 0 if s.checkpointing else 2 * s.seq * (s.hidden // s.heads) * e  # saved inside the layers
    n = rotary + 2 * u * e + bs * 4 + u * c + bs * s.vocab * 4 + bs * 8
    copies = autocast_weight_copies(s)
    if s.checkpointing and copies:  # the layers' copies are made again when each layer is rebuilt
        copies = s.compute_bytes * s.vocab * s.hidden
    return int(n + copies)


def temporaries(s: Shape, b: int, act: int, *, stepped: int | None = None, loss: bool = True) -> int:
    """The peak above weights, gradients, optimizer state and activations (``act``): a *model*,
    fitted on eight small shapes and checked on others. The largest of the loss's two fp32
    logits-sized gradients; a layer's backward (two FFN-sized gradients at c less the 2.5u at e
    freed by then, at least 2.75u; with checkpointing plus the rebuilt layer and its bf16 weight
    copies); the optimizer's foreach buffer less the activations, freed by then. The buffer is
    one fp32 tensor per parameter the optimizer steps: ``stepped`` parameters (default all; a
    ZeRO/FSDP rank steps its shard, a pipeline stage its layers). ``loss=False``: a device that
    computes no loss (a pipeline's first stages)."""
    u, e, c = b * s.seq * s.hidden, s.dtype_bytes, s.compute_bytes
    stepped = parameters(s) if stepped is None else stepped
    foreach_buffer = stepped * e if s.optimizer_states and s.foreach else 0
    logits = 2 * b * s.seq * s.vocab * 4 if loss else 0
    layer = max(2 * b * s.seq * s.ffn_size * c - 2.5 * u * e, 2.75 * u * e)
    if s.checkpointing:
        layer += layer_activation_bytes(s, b)
        layer += c * (layer_parameters(s) - 2 * s.hidden) if s.precision == "bf16" else 0
    return int(max(logits, layer, foreach_buffer - act))
