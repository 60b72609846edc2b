"""Names in the talk (transformers 4.x) and what transformers 5.24 calls them.

from lab_utils.labs.lab04_hf import names
names.TALK_TO_CURRENT["evaluation_strategy"]     # 'eval_strategy'
"""

from __future__ import annotations

__all__ = ["TALK_TO_CURRENT"]

TALK_TO_CURRENT: dict[str, str] = {
    "evaluation_strategy": "eval_strategy",  # TrainingArguments: removed in 5.x (TypeError)
    "no_cuda": "use_cpu",  # TrainingArguments: removed in 5.x (TypeError)
    "gradient_checkpointing": "activation_checkpointing",  # TrainingArguments: works, FutureWarning
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",  # works in 5.x, FutureWarning
    "tokenizer": "processing_class",  # Trainer(tokenizer=) -> processing_class=
    "gradient_checkpointing_enable": "activation_checkpointing_enable",  # model method, FutureWarning
    "is_gradient_checkpointing": "is_activation_checkpointing",  # model property, FutureWarning
}
"""Names in the talk -> names transformers 5.24 expects."""
