"""Lab 2, gradient accumulation by hand: windows, losses as sums, the large-batch reference,
figures and graders (the loops themselves are lab cells).

    from lab_utils.labs import lab02_accumulation as accumulation
    accumulation.windows(micro_batches, 4)                 # K micro-batches per update
    accumulation.mse_sum(model, mb) / accumulation.count_items(mb)
"""

from lab_utils.labs import lazy

_NAMES = {
    **dict.fromkeys(["windows", "window_sizes", "num_updates", "concat_batches"], "windowing"),
    **dict.fromkeys(["count_items", "count_tokens", "mse_sum", "lm_token_loss_sum"], "losses"),
}
__all__ = ["datasets", "exercises", "figures", "reference", *_NAMES]

__getattr__ = lazy(__name__, ["datasets", "exercises", "figures", "reference", "losses", "windowing"], _NAMES)
