"""The talk's transformers 4.x argument names and the ones transformers 5 expects.

from lab_utils.topics.hf import names
names.TALK_TO_CURRENT["evaluation_strategy"]               # 'eval_strategy'
names.current_names(evaluation_strategy="epoch", gradient_checkpointing=True)
# -> {'eval_strategy': 'epoch', 'activation_checkpointing': True}
"""

from __future__ import annotations

from typing import Any

__all__ = ["TALK_TO_CURRENT", "current_names"]

TALK_TO_CURRENT: dict[str, str] = {
    "evaluation_strategy": "eval_strategy",  # removed in transformers 5: TypeError
    "no_cuda": "use_cpu",  # removed in transformers 5: TypeError
    "gradient_checkpointing": "activation_checkpointing",  # works in 5.x, FutureWarning
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",  # works, FutureWarning
    "tokenizer": "processing_class",  # Trainer(tokenizer=) -> processing_class=
    "gradient_checkpointing_enable": "activation_checkpointing_enable",  # model method, FutureWarning
    "is_gradient_checkpointing": "is_activation_checkpointing",  # model property, FutureWarning
}
"""Names in the talk (transformers 4.x) -> names transformers 5.24 expects."""


def current_names(**kwargs: Any) -> dict[str, Any]:
    """The same arguments under the names the pinned transformers expects."""
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        new = TALK_TO_CURRENT.get(k, k)
        if new in out:
            raise ValueError(f"{k!r} and {new!r} name the same setting; pass only {new!r}")
        out[new] = v
    return out
