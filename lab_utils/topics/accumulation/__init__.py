"""Lab 2, gradient accumulation by hand: windows, losses as sums, the large-batch reference,
figures and exercise graders. The loops themselves are written in the lab's cells.

    from lab_utils.topics import accumulation
    accumulation.windows(micro_batches, 4)                 # windowing.py: K micro-batches per update
    accumulation.num_updates(50, 8, epochs=3)              #   updates a scheduler must plan for
    accumulation.concat_batches(window)                    #   a window as one large batch
    accumulation.mse_sum(model, mb), accumulation.count_items(mb)          # losses.py: sums and
    accumulation.lm_token_loss_sum(model, mb), accumulation.count_tokens(mb)  # the counts
    accumulation.reference.train_large_batch(model, opt, micro_batches, 4, loss_sum=...)  # reference.py
    accumulation.datasets.lm_by_length(10, 4, 4)           # datasets.py: data that makes a point show
    accumulation.figures.gap(gaps)                         # figures.py: the lab's plotly figures
    accumulation.exercises.check_token_stream(token_accumulate)  # exercises.py: the graders
"""

from lab_utils.topics import lazy

_NAMES = {
    **dict.fromkeys(["windows", "window_sizes", "num_updates", "concat_batches"], "windowing"),
    **dict.fromkeys(["count_items", "count_tokens", "mse_sum", "lm_token_loss_sum"], "losses"),
}
__all__ = [
    "datasets",
    "exercises",
    "figures",
    "reference",
    "windows",
    "window_sizes",
    "num_updates",
    "concat_batches",
    "count_items",
    "count_tokens",
    "mse_sum",
    "lm_token_loss_sum",
]

__getattr__ = lazy(__name__, ["datasets", "exercises", "figures", "reference", "losses", "windowing"], _NAMES)
