"""Names in the talk (transformers 4.x) that transformers 5 renamed, beyond the three that lab 4's
exercise 1 asks about (``evaluation_strategy``, ``gradient_checkpointing``, ``no_cuda``: finding
those is the exercise, so they are not listed here).

from lab_utils.topics.hf import names
names.TALK_TO_CURRENT["tokenizer"]               # 'processing_class'
"""

from __future__ import annotations

__all__ = ["TALK_TO_CURRENT"]

TALK_TO_CURRENT: dict[str, str] = {
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",  # works in 5.x, FutureWarning
    "tokenizer": "processing_class",  # Trainer(tokenizer=) -> processing_class=
    "gradient_checkpointing_enable": "activation_checkpointing_enable",  # model method, FutureWarning
    "is_gradient_checkpointing": "is_activation_checkpointing",  # model property, FutureWarning
}
"""Names in the talk -> names transformers 5.24 expects (exercise 1's three excepted)."""
