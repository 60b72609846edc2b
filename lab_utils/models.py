"""Tiny, deterministic models built from code or configs: nothing is downloaded.

from lab_utils import models
mlp = models.mlp(width=256, depth=8, seed=0)            # nn.Sequential of Linear+GELU blocks
chain = models.transformer_chain(n_blocks=6, d_model=64)  # nn.Sequential of pre-LN blocks
lm = models.tiny_gpt2(n_layer=2, n_embd=64)              # transformers GPT2LMHeadModel
clf = models.tiny_classifier(num_labels=2)              # transformers GPT2ForSequenceClassification
bert = models.bert_classifier(n_layer=2, hidden=64)      # transformers BertForSequenceClassification
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "mlp",
    "MLPBlock",
    "TransformerBlock",
    "transformer_chain",
    "tiny_gpt2",
    "tiny_classifier",
    "bert_classifier",
]


class MLPBlock(nn.Module):
    """Linear -> GELU: one matmul (expensive) then one pointwise op (cheap to recompute)."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


def mlp(
    width: int = 256,
    depth: int = 8,
    *,
    in_dim: int | None = None,
    out_dim: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> nn.Sequential:
    """An ``nn.Sequential`` of ``depth`` MLPBlocks, with optional input/output projections."""
    if width < 1 or depth < 1:
        raise ValueError(f"mlp(width={width}, depth={depth}): both must be >= 1")
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    if in_dim is not None:
        layers.append(nn.Linear(in_dim, width))
    layers += [MLPBlock(width) for _ in range(depth)]
    if out_dim is not None:
        layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers).to(dtype)


class TransformerBlock(nn.Module):
    """A pre-LayerNorm transformer block (causal self-attention + MLP), small enough for a CPU."""

    def __init__(self, d_model: int = 64, n_heads: int = 4):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        # Plain attention (not the fused kernel) so every saved tensor is visible to the meters.
        att = (q @ k.transpose(-2, -1)) * (d // self.n_heads) ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc_out(self.act(self.fc(self.ln2(x))))


def transformer_chain(n_blocks: int = 4, d_model: int = 64, n_heads: int = 4, *, seed: int = 0) -> nn.Sequential:
    """``n_blocks`` TransformerBlocks in an ``nn.Sequential`` (input and output: [batch, seq, d_model])."""
    if n_blocks < 1:
        raise ValueError(f"transformer_chain(n_blocks={n_blocks}): must be >= 1")
    torch.manual_seed(seed)
    return nn.Sequential(*[TransformerBlock(d_model, n_heads) for _ in range(n_blocks)])


def _gpt2_config(vocab_size: int, n_positions: int, n_embd: int, n_layer: int, n_head: int, **extra):
    # transformers is imported where it is used: it takes seconds, and most labs never need it.
    from transformers import GPT2Config

    # GPT-2's special ids (50256) lie outside a tiny vocabulary: use its last id instead, so
    # transformers has nothing to warn about.
    extra.setdefault("bos_token_id", vocab_size - 1)
    extra.setdefault("eos_token_id", vocab_size - 1)
    # The labs train these models and never sample from them: no key/value cache, which
    # checkpointing would switch off anyway (with a note on every call).
    extra.setdefault("use_cache", False)
    return GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **extra,
    )


def tiny_gpt2(
    n_layer: int = 2, n_embd: int = 64, n_head: int = 4, *, vocab_size: int = 128, n_positions: int = 128, seed: int = 0
):
    """A GPT-2 causal LM built from a config (random weights, dropout off, no download)."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(_gpt2_config(vocab_size, n_positions, n_embd, n_layer, n_head))
    # Naming the loss spares transformers' note that an unset loss_type falls back to this one.
    model.loss_type = "ForCausalLM"
    return model


def tiny_classifier(num_labels: int = 2, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, *, seed: int = 0):
    """A GPT-2 sequence classifier (vocabulary and positions 128) built from a config; its pad id
    (0) lets it find each sequence's last token."""
    from transformers import GPT2ForSequenceClassification

    torch.manual_seed(seed)
    cfg = _gpt2_config(128, 128, n_embd, n_layer, n_head, num_labels=num_labels, pad_token_id=0)
    return GPT2ForSequenceClassification(cfg)


def bert_classifier(
    n_layer: int = 2,
    hidden: int = 64,
    n_head: int = 4,
    *,
    vocab_size: int = 128,
    n_positions: int = 128,
    dropout: float = 0.1,
    seed: int = 0,
):
    """A BERT sequence classifier (2 labels) built from a config: random weights, no download.
    ``n_layer=24, hidden=1024, n_head=16, vocab_size=30522, n_positions=512`` is bert-large's shape."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=n_layer,
        num_attention_heads=n_head,
        intermediate_size=4 * hidden,
        max_position_embeddings=n_positions,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        num_labels=2,
        use_cache=False,  # training only (checkpointing would turn it off, with a note)
    )
    cfg._attn_implementation = "eager"  # keeps the score tensors, as the 2022 implementation did
    torch.manual_seed(seed)
    return BertForSequenceClassification(cfg)
