"""Each grader fails the bug its exercise is about and says "not attempted" for a stub."""

import pytest
import torch
import torch.nn.functional as F

from lab_utils.checks import NOT_ATTEMPTED, PASSED
from lab_utils.labs import lab02_accumulation as accumulation
from lab_utils.labs.lab02_accumulation import exercises
from tests.helpers.grading import graded_fail


# -- acc-tf-port --------------------------------------------------------------------------
def tf_port(divide: bool):
    def tf_style_accumulate(model, micro_batches, loss_fn):
        params = list(model.parameters())
        accum_vars = [torch.zeros_like(p) for p in params]
        for mb in micro_batches:
            for acc, g in zip(accum_vars, torch.autograd.grad(loss_fn(model, mb), params)):
                acc.add_(g / len(micro_batches) if divide else g)
        return accum_vars

    return tf_style_accumulate


def test_tf_port_passes_with_the_division_and_fails_as_the_seed_wrote_it(capsys):
    assert exercises.check_tf_port(tf_port(divide=True)) == PASSED
    graded_fail(exercises.check_tf_port, tf_port(divide=False), match="✗.*norm is 3 x")  # the recipe: a sum of 3 means


def tf_port_built_once(zero_each_window: bool):
    """Buffers built once, as TensorFlow's variables are, and zeroed before each window (zero_ops) or never."""
    accum_vars = []

    def tf_style_accumulate(model, micro_batches, loss_fn):
        params = list(model.parameters())
        if not accum_vars:
            accum_vars.extend(torch.zeros_like(p) for p in params)
        if zero_each_window:
            for acc in accum_vars:
                acc.zero_()
        for mb in micro_batches:
            for acc, g in zip(accum_vars, torch.autograd.grad(loss_fn(model, mb), params)):
                acc.add_(g / len(micro_batches))
        return accum_vars

    return tf_style_accumulate


def test_tf_port_with_buffers_built_once_passes_zeroed_and_fails_never_reset():
    assert exercises.check_tf_port(tf_port_built_once(zero_each_window=True)) == PASSED
    # one call alone cannot tell: the second window shows the first one's gradient still in the buffers
    graded_fail(exercises.check_tf_port, tf_port_built_once(zero_each_window=False), match="✗.*not zeroed in between")


def test_tf_port_fails_when_it_fills_grad_instead_of_buffers():
    def through_grad(model, micro_batches, loss_fn):
        for mb in micro_batches:
            (loss_fn(model, mb) / len(micro_batches)).backward()
        return [p.grad for p in model.parameters()]

    graded_fail(exercises.check_tf_port, through_grad, match="✗.*filled .grad")


def test_tf_port_fails_with_one_autograd_grad_on_the_concatenated_batch():
    def one_big_grad(model, micro_batches, loss_fn):  # the large batch's gradient, but no accumulation
        big = (torch.cat([x for x, _ in micro_batches]), torch.cat([y for _, y in micro_batches]))
        return list(torch.autograd.grad(loss_fn(model, big), list(model.parameters())))

    graded_fail(exercises.check_tf_port, one_big_grad, match="1 forward.*one forward per micro-batch")


# -- acc-clip --------------------------------------------------------------------------
def clipping(
    *,
    per_micro_batch: bool = False,
    unscale: bool = True,
    use_scaler: bool = True,
    divide: bool = True,
    scaled_max_norm: bool = False,
):
    """scaled_max_norm: clip the gradient the scaler holds (scaled) to max_norm * scaler.get_scale()."""

    def accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler):
        def clip():
            if unscale and use_scaler:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(
                model.parameters(), max_norm * (scaler.get_scale() if scaled_max_norm else 1)
            )

        for window in accumulation.windows(micro_batches, K):
            for x, y in window:
                loss = F.mse_loss(model(x), y) / (len(window) if divide else 1)
                (scaler.scale(loss) if use_scaler else loss).backward()
                if per_micro_batch:
                    clip()
            if not per_micro_batch:
                clip()
            if use_scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()

    return accumulate_with_clipping


def clip_by_hand(eps: float):
    """Clipped by hand after unscale_: exactly to max_norm (eps=0), or with clip_grad_norm_'s 1e-6."""

    def accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler):
        for window in accumulation.windows(micro_batches, K):
            for x, y in window:
                scaler.scale(F.mse_loss(model(x), y) / len(window)).backward()
            scaler.unscale_(optimizer)
            grads = [p.grad for p in model.parameters()]
            norm = torch.sqrt(sum((g**2).sum() for g in grads))
            if norm > max_norm:
                for g in grads:
                    g.mul_(max_norm / (norm + eps))
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

    return accumulate_with_clipping


def modulo_loop(*, step_the_rest: bool):
    """Section 1's `if (i + 1) % K == 0` loop, each loss / K; with a step after the loop for the rest, or not."""

    def accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler):
        def step():
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

        for i, (x, y) in enumerate(micro_batches):
            scaler.scale(F.mse_loss(model(x), y) / K).backward()
            if (i + 1) % K == 0:
                step()
        if step_the_rest and len(micro_batches) % K:
            step()

    return accumulate_with_clipping


# clip_grad_norm_, or by hand exactly to max_norm (not clip_grad_norm_'s 1e-6: the same clip), or with its 1e-6
@pytest.mark.parametrize("right", [clipping(), clip_by_hand(0.0), clip_by_hand(1e-6)])
def test_clipping_passes_clip_grad_norm_and_a_clip_written_by_hand(right):
    assert exercises.check_clipping(right) == PASSED


def test_clipping_passes_the_scaled_gradient_clipped_to_max_norm_times_the_scale():
    # the student review's answer: no unscale_, clip_grad_norm_ to max_norm * scale, then scaler.step.
    # Its factor max_norm / (norm + 1e-6 / scale) lies between the two references' (~1e-12 from
    # clip_grad_norm_'s run, more than TOL); the nearest wrong answers stay ~1e-3 away
    assert exercises.CLIP_TOL > exercises.TOL
    assert exercises.check_clipping(clipping(unscale=False, scaled_max_norm=True)) == PASSED
    for wrong in (
        clipping(unscale=False, scaled_max_norm=True, per_micro_batch=True),  # clips partial sums: 1.2e-3
        clipping(unscale=False, scaled_max_norm=True, divide=False),  # forgot / K: 4.9e-3
    ):
        graded_fail(exercises.check_clipping, wrong, match="✗.*differ from the clipped large batch's by [0-9.]+e-0[34]")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (modulo_loop(step_the_rest=False), r"called 4 / 4 times for 5 windows .*the short last window included"),
        (modulo_loop(step_the_rest=True), "last window holds 2 micro-batches and your loop divided its loss by K"),
    ],
)
def test_clipping_fails_the_modulo_loop_on_the_short_last_window(wrong, message):
    graded_fail(exercises.check_clipping, wrong, match=f"✗.*{message}")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (clipping(per_micro_batch=True), "torch stopped your loop.*unscale_"),  # a second unscale_ in a window
        (clipping(per_micro_batch=True, unscale=False), "clipped large batch"),  # clips partial, scaled sums
        (clipping(unscale=False), "clipped large batch"),  # clips the scaled gradient: 2^16 times too long
        (clipping(use_scaler=False), "scaler.scale was called 0 times"),  # right parameters, scaler ignored
        (clipping(divide=False), "only 3 of its 5 updates were clipped"),  # forgot / K: K times the gradient
    ],
)
def test_clipping_fails_per_micro_batch_without_unscale_or_without_the_scaler(wrong, message):
    graded_fail(exercises.check_clipping, wrong, match=f"✗.*{message}")


# -- acc-tokens --------------------------------------------------------------------------
def token_stream(
    *, per_micro_batch_mean: bool = False, look_ahead: bool = False, last_window: bool = True, fp32: bool = False
):
    def token_accumulate(model, optimizer, stream, K):
        micro = list(stream) if look_ahead else stream
        tokens, seen = 0, 0

        def step():
            for p in model.parameters():
                p.grad /= 1 if per_micro_batch_mean else tokens
            optimizer.step()
            optimizer.zero_grad()

        for mb in micro:
            if fp32:  # transformers' loss, summed (num_items_in_batch=1): computed in float32
                loss = model(**mb, num_items_in_batch=torch.tensor(1)).loss
            else:
                loss = accumulation.lm_token_loss_sum(model, mb)
            (loss / accumulation.count_tokens(mb) / K if per_micro_batch_mean else loss).backward()
            tokens, seen = tokens + accumulation.count_tokens(mb), seen + 1
            if seen == K:
                step()
                tokens, seen = 0, 0
        if seen and last_window:
            step()

    return token_accumulate


@pytest.mark.parametrize(
    "wrong, message",
    [
        (token_stream(per_micro_batch_mean=True), "differs from the large batch"),  # the mean of means
        (token_stream(look_ahead=True), "asked for micro-batch 1 after only 0 forwards"),  # reads the window first
        (token_stream(last_window=False), r"steps after micro-batches \[3, 6\], expected after \[3, 6, 8\]"),
        (
            token_stream(fp32=True),
            r"differs from the large batch's by [0-9.]+e-09: a gap this small looks like float32",
        ),
    ],
)
def test_token_stream_fails_mean_of_means_look_ahead_and_a_dropped_last_window(wrong, message):
    graded_fail(exercises.check_token_stream, wrong, match=f"✗.*{message}")


def test_token_stream_names_float32_only_for_a_float32_sized_gap_and_its_hint_keeps_the_idea(capsys):
    out = graded_fail(exercises.check_token_stream, token_stream(per_micro_batch_mean=True), match="by 1.6e-02")
    assert "float32" not in out and "num_items_in_batch" not in out  # the mean of means: not a rounding gap
    assert exercises.check_token_stream(stub) == NOT_ATTEMPTED
    printed = capsys.readouterr().out  # the ○ line prints the hint: it must not give the key idea away
    assert "hint: reread section 2.3" in printed and "linear" not in printed and "when must" not in printed


def test_token_stream_says_a_stream_has_no_len():
    def counts_first(model, optimizer, stream, K):
        n_windows = -(-len(stream) // K)  # noqa: F841 - a stream has no len()

    graded_fail(exercises.check_token_stream, counts_first, match="✗.*has no len\\(\\).*loop over it once")
    assert exercises.check_token_stream(token_stream()) == PASSED


# -- acc-norms --------------------------------------------------------------------------
def test_norms_right_set_passes_and_untracked_batchnorm_in_eval_fails():
    assert exercises.check_norms({"groupnorm", "rmsnorm", "dropout-eval"}) == PASSED
    # "eval mode is exact": not without running stats
    graded_fail(
        exercises.check_norms, {"groupnorm", "rmsnorm", "dropout-eval", "batchnorm-untracked-eval"}, match="✗.*1 wrong"
    )
    # the ✗ names each layer it got wrong, both ways
    out = graded_fail(exercises.check_norms, {"groupnorm", "dropout-eval", "batchnorm-untracked-eval"}, match="2 wrong")
    assert "'batchnorm-untracked-eval' is in your set, but trained with accumulation it ends" in out
    assert "'rmsnorm' is not in your set" in out and "'groupnorm'" not in out
    graded_fail(exercises.check_norms, {"layernorm"}, match="unknown names")
    graded_fail(exercises.check_norms, "groupnorm", match="give a set of names")


# -- one graph at a time: the three code exercises ----------------------------------------
# Each wrong answer below computes the right numbers but keeps every micro-batch's graph alive until
# one backward per window: the large batch's activation memory, which accumulation exists to avoid.
ONE_GRAPH = "✗.*forward 2 started while 1 earlier micro-batch graph.*had not been backpropagated"


def test_token_stream_fails_one_backward_per_window():
    def token_accumulate(model, optimizer, stream, K):
        losses, tokens = [], 0

        def step():
            (sum(losses) / tokens).backward()
            optimizer.step()
            optimizer.zero_grad()

        for mb in stream:
            losses.append(accumulation.lm_token_loss_sum(model, mb))
            tokens += accumulation.count_tokens(mb)
            if len(losses) == K:
                step()
                losses, tokens = [], 0
        if losses:
            step()

    graded_fail(exercises.check_token_stream, token_accumulate, match=ONE_GRAPH)


def test_tf_port_fails_one_autograd_grad_over_the_summed_losses():
    def tf_style_accumulate(model, micro_batches, loss_fn):  # one forward per micro-batch, one autograd.grad
        loss = sum(loss_fn(model, mb) for mb in micro_batches) / len(micro_batches)
        return [g.clone() for g in torch.autograd.grad(loss, list(model.parameters()))]

    graded_fail(exercises.check_tf_port, tf_style_accumulate, match=ONE_GRAPH)


def test_clipping_fails_one_backward_over_the_summed_scaled_losses():
    def accumulate_with_clipping(model, optimizer, micro_batches, K, max_norm, scaler):
        for window in accumulation.windows(micro_batches, K):
            sum(scaler.scale(F.mse_loss(model(x), y) / len(window)) for x, y in window).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

    graded_fail(exercises.check_clipping, accumulate_with_clipping, match=ONE_GRAPH)


def test_one_graph_at_a_time_counts_backward_and_autograd_grad_and_ignores_no_grad():
    model = torch.nn.Linear(2, 1)
    guard = exercises.OneGraphAtATime(model)
    x = torch.ones(3, 2)
    model(x).sum().backward()
    torch.autograd.grad(model(x).sum(), list(model.parameters()))
    with torch.no_grad():
        model(x)
    model(x)
    assert guard.forwards == 3 and guard.pending == {3}


# ----------------------------------------------------------------------------- stubs
def stub(*args):
    raise NotImplementedError()


@pytest.mark.parametrize(
    "check", [exercises.check_tf_port, exercises.check_clipping, exercises.check_token_stream, exercises.check_norms]
)
def test_stubs_are_not_attempted(check, capsys):
    assert check(...) == NOT_ATTEMPTED
    assert "not attempted" in capsys.readouterr().out
    if check is not exercises.check_norms:
        assert check(stub) == NOT_ATTEMPTED
