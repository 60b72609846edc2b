"""What the step-memory calculator takes and gives: a ``Shape`` (a model, its batch and how it is
trained) and an ``Anatomy`` (bytes of each part of a step's memory). Shared by ``stepmem`` and the
architectures it dispatches to (``gpt2_bert``, ``llama``), so neither imports the other."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["Shape", "Anatomy", "ARCHS", "PRECISIONS", "ATTENTIONS", "OPTIMIZERS"]

ARCHS = ("gpt2", "bert", "llama")
PRECISIONS = ("fp32", "bf16")  # bf16: autocast to bf16, fp32 master weights and optimizer state
ATTENTIONS = ("eager", "sdpa")
OPTIMIZERS = ("adamw", "sgd_momentum", "sgd")


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
        if self.arch == "llama" and self.dropout > 0:
            raise ValueError(
                f"Shape(arch='llama', dropout={self.dropout}): Llama shapes are modelled without attention dropout "
                "(its masks are not counted); give dropout=0"
            )
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

    @property
    def optimizer_states(self) -> int:
        """State tensors the optimizer keeps per parameter: AdamW's two moments, SGD's momentum."""
        states = {"adamw": 2, "sgd_momentum": 1, "sgd": 0}
        return states[self.optimizer]


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
