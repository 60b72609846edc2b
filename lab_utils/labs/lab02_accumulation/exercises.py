"""Lab 2's exercise graders: each runs the student's code and compares it with one large batch.

    exercises.check_norms(exact_layers)                 # acc-norms: which layers accumulate exactly
    exercises.check_token_stream(token_accumulate)      # acc-tokens: token losses from a stream
    exercises.check_clipping(accumulate_with_clipping)  # acc-clip: clip once per window, with a scaler
    exercises.check_tf_port(tf_style_accumulate)        # acc-tf-port: TensorFlow's accum_vars, ported

In float64, where "equal" means equal to rounding (1e-12); each grader builds its own reference.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils import data, models
from lab_utils.checks import grader, param_max_diff
from lab_utils.flat import flat
from lab_utils.labs.lab02_accumulation.losses import count_items, count_tokens, lm_token_loss_sum, mse_sum
from lab_utils.labs.lab02_accumulation.reference import large_batch_grads, train_large_batch
from lab_utils.labs.lab02_accumulation.windowing import windows

__all__ = [
    "check_tf_port",
    "check_clipping",
    "check_token_stream",
    "check_norms",
    "LAYERS",
    "CountingScaler",
    "OneGraphAtATime",
    "Stream",
]

F64 = torch.float64
TOL = 1e-12
# check_clipping accepts two references that differ by ~1e-7 (clip_grad_norm_'s 1e-6 in its factor);
# a clip of the still-scaled gradient to max_norm * scale lands between them, ~1e-12 from one. The
# nearest wrong answers (clip per micro-batch, a forgotten 1 / K) are ~1e-3 away.
CLIP_TOL = 1e-9
# check_token_stream: below this, a gap to the large batch is float32 rounding (transformers' loss:
# 3e-9 after 3 updates); a wrong weighting of the tokens (the mean of means) is ~1e-2
FLOAT32_GAP = 1e-5


def _regression(n_micro: int) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    x, y = data.regression(n=n_micro * 8, dim=8, out_dim=2, dtype=F64, seed=1)
    return models.mlp(16, 2, in_dim=8, out_dim=2, dtype=F64, seed=1), list(data.batches(x, y, batch_size=8))


def _mse_mean(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x), y)


class OneGraphAtATime:
    """Hooks on ``model`` that stop a forward while an earlier forward's graph has not been
    backpropagated: accumulation keeps one micro-batch's activations alive at a time, and code that
    keeps every micro-batch's loss for one backward per window (``sum(losses).backward()``) holds
    them all, as one large batch does. A hook on each forward's output (``.logits`` for a language
    model) notes when a gradient reaches it; ``backward()`` and ``torch.autograd.grad`` both fire it.
    Forwards whose output needs no gradient (under ``torch.no_grad()``) are not counted."""

    def __init__(self, model: nn.Module) -> None:
        self.forwards, self.pending = 0, set()  # forwards run; those whose output no gradient reached yet
        model.register_forward_pre_hook(self._before)
        model.register_forward_hook(self._after)

    def _before(self, *_) -> None:
        assert not self.pending, (
            f"forward {self.forwards + 1} started while {len(self.pending)} earlier micro-batch graph(s) had not "
            "been backpropagated: their activations are all alive at once, as in one large batch; backpropagate "
            "each micro-batch's loss before the next forward"
        )

    def _after(self, module: nn.Module, args, out) -> None:
        out = out if torch.is_tensor(out) else out.logits
        if out.requires_grad:
            self.forwards += 1
            self.pending.add(self.forwards)
            out.register_hook(lambda grad, n=self.forwards: self.pending.discard(n))


def _sgd(model: nn.Module, lr: float, momentum: float = 0.0) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


@grader(
    "acc-tf-port",
    "TensorFlow's accum_vars recipe, ported to PyTorch",
    hint="reread section 1: what does one large batch's gradient average over, and what do your buffers add up?",
)
def check_tf_port(tf_style_accumulate: Callable) -> str:
    """``tf_style_accumulate(model, micro_batches, loss_fn)`` returns one buffer per parameter that
    must hold the large-batch gradient; ``.grad`` must stay untouched (the buffers are the point).
    Called once per window, for two windows in a row with an SGD step between them, as a training
    loop calls it: buffers built once and never zeroed show on the second window."""
    model, micro = _regression(n_micro=6)  # two windows of 3: not a power of two, so a wrong divisor shows
    params = list(model.parameters())
    rows: list[int] = []
    model.register_forward_pre_hook(lambda m, args: rows.append(args[0].shape[0]))
    OneGraphAtATime(model)
    before: list[torch.Tensor] = []  # the previous window's buffers, as returned
    for n, window in enumerate((micro[:3], micro[3:]), start=1):
        rows.clear()
        got = list(tf_style_accumulate(model, window, _mse_mean))
        sizes = [len(b[0]) for b in window]
        assert rows == sizes, (
            f"your function ran {len(rows)} forward(s) on batches of {rows} rows; the recipe runs one forward per "
            f"micro-batch ({sizes}), so that only one micro-batch's activations are alive at a time"
        )
        assert all(p.grad is None for p in params), (
            "your function filled .grad: compute each micro-batch's gradients with torch.autograd.grad "
            "and add them into your own buffers, as accum_vars does"
        )
        assert len(got) == len(params) and all(g.shape == p.shape for g, p in zip(got, params)), (
            f"expected {len(params)} buffers shaped like model.parameters(), got {len(got)}"
        )
        got = [g.detach().clone() for g in got]
        ref = large_batch_grads(model, window, loss_sum=mse_sum)
        if n == 2 and param_max_diff(got, ref) >= TOL:
            stale = param_max_diff([g - b for g, b in zip(got, before)], ref) < TOL
            assert not stale, (
                "called for a second window, your buffers held this window's gradient plus the first window's: "
                "they were not zeroed in between (the recipe runs zero_ops before each window)"
            )
        ratio = flat(got).norm().item() / flat(ref).norm().item()
        assert param_max_diff(got, ref) < TOL, (
            f"window {n}: the buffers are not the large-batch gradient: their norm is {ratio:.3g} x its norm "
            f"over {len(window)} micro-batches"
        )
        with torch.no_grad():  # the recipe's train_step, so that the second window starts elsewhere
            for p, g in zip(params, got):
                p.sub_(0.1 * g)
        before = got
    return "2 windows in a row: each time the buffers hold the gradient of one batch of 3 micro-batches"


class CountingScaler(torch.amp.GradScaler):
    """A CPU ``GradScaler`` that counts how often each of its methods is called (its own calls too)."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.calls = dict.fromkeys(("scale", "unscale_", "step", "update"), 0)
        for name in self.calls:
            setattr(self, name, self._counted(name, getattr(self, name)))

    def _counted(self, name: str, method: Callable) -> Callable:
        def call(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return call


@grader(
    "acc-clip",
    "clip once per window, with a gradient scaler",
    hint="reread section 2.6: which gradient does one large batch clip, and what does the scaler hold in .grad?",
)
def check_clipping(accumulate_with_clipping: Callable) -> str:
    """``accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler)`` must train
    like one large batch per window whose gradient is clipped to ``max_norm`` before each step,
    with every loss scaled by ``scaler`` (a CPU ``GradScaler``). The last window is short.
    Clipped by ``clip_grad_norm_`` (whose factor is ``max_norm / (norm + 1e-6)``) or exactly to
    ``max_norm`` by hand: either passes, and so does any run within ``CLIP_TOL`` of them."""
    k, last = 4, 2
    model, micro = _regression(n_micro=4 * k + last)  # windows of 4, 4, 4, 4 and 2 (section 2.4)
    # max_norm between the windows' norms: some updates are clipped, some not, so the gradient's
    # scale matters (a max_norm that binds on every window would hide a forgotten 1 / K)
    free = copy.deepcopy(model)
    free_norms = train_large_batch(free, _sgd(free, 0.05, 0.9), micro, k, loss_sum=mse_sum)
    low, high = sorted(free_norms)[len(free_norms) // 2 - 1 : len(free_norms) // 2 + 1]
    max_norm = (low + high) / 2  # strictly between two windows' norms

    def large_batch(**kw) -> tuple[nn.Module, list[float]]:
        ref = copy.deepcopy(model)
        return ref, train_large_batch(ref, _sgd(ref, 0.05, 0.9), micro, k, loss_sum=mse_sum, max_norm=max_norm, **kw)

    ref, norms = large_batch()
    exact, _ = large_batch(exact_clip=True)  # a clip written by hand: the same run to ~1e-8
    clipped, n_windows = sum(n > max_norm for n in norms), len(norms)
    # the grader's own premises: max_norm binds on some windows only, and it would not hide the
    # last window's size (divided by K instead, that window's gradient is not clipped)
    if not 0 < clipped < n_windows or norms[-1] * last / k >= max_norm:
        raise RuntimeError(f"check_clipping: max_norm {max_norm:.3g} must bind on some windows only: {norms}")
    mine, scaler = copy.deepcopy(model), CountingScaler()
    OneGraphAtATime(mine)
    try:
        accumulate_with_clipping(mine, _sgd(mine, 0.05, 0.9), micro, k, max_norm, scaler)
    except RuntimeError as err:
        raise AssertionError(f"torch stopped your loop: {err}") from None
    assert scaler.calls["scale"] == len(micro), (
        f"scaler.scale was called {scaler.calls['scale']} times for {len(micro)} micro-batches: scale every loss"
    )
    assert scaler.calls["step"] == scaler.calls["update"] == n_windows, (
        f"scaler.step / update were called {scaler.calls['step']} / {scaler.calls['update']} times "
        f"for {n_windows} windows of K = {k} micro-batches, the last of {last} ({len(micro)} micro-batches): "
        "once per window each, the short last window included (section 2.4)"
    )
    assert param_max_diff(mine, model) > 0, "the parameters did not move: step the optimizer once per window"
    gap = min(param_max_diff(mine, ref), param_max_diff(mine, exact))
    if gap >= CLIP_TOL:  # a last window divided by K instead of its size: that mistake, named
        by_k, _ = large_batch(items=lambda big: max(count_items(big), k * count_items(micro[0])))
        assert param_max_diff(mine, by_k) >= CLIP_TOL, (
            f"the last window holds {last} micro-batches and your loop divided its loss by K = {k}: its update "
            f"is {last}/{k} of one large batch of those {last} (section 2.4: divide by the window's real size)"
        )
    moved = param_max_diff(mine, model) / param_max_diff(ref, model)
    assert gap < CLIP_TOL, (
        f"after {n_windows} updates your parameters differ from the clipped large batch's by {gap:.1e} "
        f"(they moved {moved:.2g} x as far). max_norm was {max_norm:.3g}; the large batch's gradient norms "
        f"were {', '.join(f'{n:.3g}' for n in norms)}, so only {clipped} of its {n_windows} updates were "
        "clipped: is your window's gradient the large batch's (its scale included) when you clip it?"
    )
    return (
        f"{n_windows} updates through the scaler (the last of {last} micro-batches; {clipped} clipped), "
        "equal to the clipped large batch"
    )


class Stream:
    """Micro-batches handed out one at a time: micro-batch ``i`` only once the model has run the
    forward of micro-batch ``i - 1`` (a data stream you cannot look ahead in). An iterable only:
    ``len(stream)`` and ``stream[i]`` raise TypeError, as for a generator."""

    def __init__(self, micro_batches: list, model: nn.Module) -> None:
        self.micro_batches, self.forwards, self.served = micro_batches, 0, 0
        model.register_forward_pre_hook(self._count)

    def _count(self, *_) -> None:
        self.forwards += 1

    def __iter__(self):
        for i, mb in enumerate(self.micro_batches):
            assert self.forwards >= i, (
                f"your loop asked for micro-batch {i} after only {self.forwards} forwards: in this exercise "
                "the micro-batches arrive one at a time, so a window's token count is known only after its forwards"
            )
            self.served += 1
            yield mb


@grader(
    "acc-tokens",
    "token losses from a stream",
    hint="reread section 2.3 (what one large batch divides by) and 2.4 (the last window)",
)
def check_token_stream(token_accumulate: Callable) -> str:
    """``token_accumulate(model, optimizer, stream, K)`` trains on a stream of token micro-batches
    (no look-ahead), one step per K of them; the run must equal one large batch per window,
    the short last window included."""
    k = 3
    micro = [data.lm_batch(n=3, vocab_size=64, min_len=3, max_len=16, seed=s) for s in range(2 * k + 2)]
    if len({count_tokens(mb) for mb in micro[:k]}) < 2:  # the grader's own premise
        raise RuntimeError("check_token_stream: the micro-batches must hold different numbers of tokens")
    model = models.tiny_gpt2(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32).to(F64)
    mine, ref = copy.deepcopy(model), copy.deepcopy(model)
    opt, stream = _sgd(mine, 0.5), Stream(micro, mine)
    OneGraphAtATime(mine)
    steps = []
    opt.register_step_post_hook(lambda *_: steps.append(stream.served))
    try:
        token_accumulate(mine, opt, stream, k)
    except TypeError as err:
        if "'Stream'" not in str(err):
            raise
        raise AssertionError(
            f"your code raised TypeError ({err}): the stream is an iterable only, with no len() and no "
            "indexing, as a generator: loop over it once (for mb in stream) and count the micro-batches and "
            "tokens as they arrive; the last window is the one the loop ends in"
        ) from None
    train_large_batch(ref, _sgd(ref, 0.5), micro, k, loss_sum=lm_token_loss_sum, items=count_tokens)
    want = [min(i + k, len(micro)) for i in range(0, len(micro), k)]
    assert steps == want, (
        f"optimizer steps after micro-batches {steps}, expected after {want} (K = {k}, {len(micro)} micro-batches: "
        "the last window is short)"
    )
    assert param_max_diff(mine, model) > 1e-6, "the parameters did not move: backpropagate the token losses"
    gap = param_max_diff(mine, ref)
    assert not TOL <= gap < FLOAT32_GAP, (
        f"after {len(steps)} updates your model differs from the large batch's by {gap:.1e}: a gap this small "
        "looks like float32 rounding. transformers' num_items_in_batch path computes its loss in float32 and "
        "the check compares in float64 to 1e-12: sum the token losses with accumulation.lm_token_loss_sum"
    )
    assert gap < TOL, f"after {len(steps)} updates your model differs from the large batch's by {gap:.1e}"
    return f"{len(steps)} updates from a stream (the last window short), each equal to one large batch"


# name -> (the layer between the MLP's two Linear layers, whether the model trains in train mode)
LAYERS: dict[str, tuple[Callable[[], nn.Module], bool]] = {
    "groupnorm": (lambda: nn.GroupNorm(4, 16), True),
    "rmsnorm": (lambda: nn.RMSNorm(16), True),
    "batchnorm-untracked-eval": (lambda: nn.BatchNorm1d(16, track_running_stats=False), False),
    "dropout-eval": (lambda: nn.Dropout(0.5), False),
}


def _gap_to_large_batch(layer: Callable[[], nn.Module], train_mode: bool) -> float:
    """How far the model with ``layer``, trained with the loop of section 1, ends from one large batch."""
    k = 4
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), layer(), nn.ReLU(), nn.Linear(16, 2)).to(F64)
    model.train(train_mode)
    _, micro = _regression(n_micro=2 * k)
    mine, ref = copy.deepcopy(model), copy.deepcopy(model)
    opt = _sgd(mine, 0.1)
    for window in windows(micro, k):
        for mb in window:
            (_mse_mean(mine, mb) / k).backward()
        opt.step()
        opt.zero_grad()
    train_large_batch(ref, _sgd(ref, 0.1), micro, k, loss_sum=mse_sum)
    return param_max_diff(mine, ref)


@grader(
    "acc-norms",
    "which layers accumulate exactly",
    hint="reread section 2.2: does one sample's output depend on the other samples of its batch, in this mode?",
)
def check_norms(exact_layers: Iterable[str]) -> str:
    """``exact_layers``: the names in ``LAYERS`` whose models, trained with accumulation, equal one large batch."""
    if isinstance(exact_layers, str):
        raise TypeError(f"exact_layers={exact_layers!r}: give a set of names, e.g. {{{next(iter(LAYERS))!r}}}")
    chosen = set(exact_layers)
    unknown = chosen - set(LAYERS)
    assert not unknown, f"unknown names {sorted(unknown)}: choose among {list(LAYERS)}"
    gaps = {name: _gap_to_large_batch(layer, train_mode) for name, (layer, train_mode) in LAYERS.items()}
    safe = {name for name, gap in gaps.items() if gap < TOL}
    wrong = [
        f"{name!r} is in your set, but trained with accumulation it ends {gaps[name]:.1e} from the large batch"
        if name in chosen
        else f"{name!r} is not in your set, but trained with accumulation it ends {gaps[name]:.0e} from the large "
        "batch: float64 rounding, so exact"
        for name in LAYERS
        if (name in chosen) != (name in safe)
    ]
    assert not wrong, (
        f"{len(LAYERS) - len(wrong)} right, {len(wrong)} wrong (each model trained twice):\n  " + "\n  ".join(wrong)
    )
    return f"all {len(LAYERS)} models trained both ways"
