"""Graders of lab 3's exercises; each runs the student's code on 2 real ranks.

    from lab_utils.labs.lab03_ddp import exercises
    exercises.check_accumulate(train_accumulating)   # ○ not attempted / ✓ / ✗ with a hint
    exercises.check_mean_loss(mean_loss)
    exercises.check_fp16_hook(fp16_hook)
    exercises.check_buckets(n_allreduces)      # a prediction, compared with a measured run

Every grader computes its own reference (one process, one large batch) and measures the
student's code with instruments attached from outside (a counting comm hook, counted
``torch.distributed`` calls).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from lab_utils.checks import fingerprint, grader, max_abs_diff
from lab_utils.env import dist_info
from lab_utils.flat import flat
from lab_utils.labs.lab03_ddp.buckets import counts, predict
from lab_utils.labs.lab03_ddp.workload import (
    Setup,
    UpdateRun,
    hooked_steps,
    large_batch_reference,
    model,
    param_bytes,
    train,
    wrap,
)
from lab_utils.launcher import launch
from lab_utils.launcher.errors import LaunchTimeout

__all__ = ["check_accumulate", "check_mean_loss", "check_fp16_hook", "check_buckets", "BUCKET_CAP_MB", "HANG_TIMEOUT"]

WORLD, K, UPDATES = 2, 4, 2
MEAN_WORLD = 3
"""Exercise 4 runs on 3 ranks, so a mean hard-coded for 2 (``total / 2``) shows."""
SETUP = Setup(micro_batch=8)
BUCKET_CAP_MB = 0.03
"""The ``bucket_cap_mb`` of exercise 2. The lab's model has 1.04 MiB of gradients; at this cap the
count in backward order (5), in registration order (6) and by division (35) all differ."""
HANG_TIMEOUT = 20.0
"""Seconds ``check_mean_loss`` waits before calling a run hung (start-up takes a few seconds)."""


def _train_stream(accumulate: Callable[..., None]) -> UpdateRun:
    """The student's loop gets all of this rank's micro-batches at once (K x UPDATES of them)."""
    return train(lambda d, o, m: accumulate(d, o, m, K), K * UPDATES, updates=1, setup=SETUP)


@grader(
    "Exercise 1 · accumulate with no_sync",
    hint="reread section 1 and section 2: which part of a micro-step decides whether its backward "
    "all-reduces, and how must each loss be scaled for K micro-batches to make one large batch?",
)
def check_accumulate(accumulate: Callable[..., None]) -> str:
    got = launch(_train_stream, WORLD, args=(accumulate,), timeout=120)
    (count,) = got[0].collectives_per_update
    assert count == UPDATES, (
        f"{K * UPDATES} micro-steps with k={K} and one gradient bucket: measured {count} all-reduces, "
        f"expected {UPDATES} (one per optimizer step)"
    )
    ref = large_batch_reference(K, WORLD, updates=UPDATES, setup=SETUP)
    gap = max_abs_diff(got[0].params, ref)
    if gap >= 1e-5:
        mistake = next((why for why, wrong in _plausible_mistakes().items()
                        if max_abs_diff(got[0].params, wrong) < 1e-5), "")  # fmt: skip
        raise AssertionError(
            f"after {UPDATES} optimizer steps the parameters are {gap:.1e} away from {UPDATES} large batches" + mistake
        )
    assert len({r.fingerprint for r in got}) == 1, "the ranks ended with different parameters"
    return f"{UPDATES} all-reduces for {K * UPDATES} micro-steps, large-batch parameters (max diff {gap:.0e})"


def _plausible_mistakes() -> dict[str, torch.Tensor]:
    """The parameters that two likely mistakes reach, computed in one process (same samples)."""
    ref = functools.partial(large_batch_reference, K, WORLD, updates=UPDATES, setup=SETUP)
    no_zero_grad = (
        "; they match the loop with no zero_grad after each step (the previous step's gradients were "
        "added in): call optimizer.zero_grad() after optimizer.step()"
    )
    unscaled = "; they match a loop whose losses are not divided by k (each step's gradient is k times too large)"
    return {no_zero_grad: ref(zero_grad=False), unscaled: ref(loss_scale=float(K))}


def _mean_loss_on_rank(mean_loss: Callable[[float], Any]) -> Any:
    out = mean_loss(1.0 + 2.5 * dist_info().rank)
    return out.item() if isinstance(out, torch.Tensor) and out.numel() == 1 else out  # a tensor is fine too


@grader(
    "Exercise 4 · every rank reaches the collective",
    hint="reread section 4's demonstration: a collective returns only when every rank has called it; "
    "which lines must every rank run, and which only rank 0?",
)
def check_mean_loss(mean_loss: Callable[[float], Any]) -> str:
    for timeout in (HANG_TIMEOUT, 4 * HANG_TIMEOUT):  # a busy machine can take longer to start 3 ranks
        try:
            got = launch(_mean_loss_on_rank, MEAN_WORLD, args=(mean_loss,), timeout=timeout)
            break
        except LaunchTimeout as err:
            if "had returned" in str(err):  # some ranks returned, others wait in a collective: the hang
                raise AssertionError(f"after {timeout:g} s {str(err).split('. ')[0]}: it still hangs") from None
    else:
        raise AssertionError(f"no rank returned within {4 * HANG_TIMEOUT:g} s: it hangs, or the machine is too busy")
    losses = [1.0 + 2.5 * r for r in range(MEAN_WORLD)]
    want = sum(losses) / MEAN_WORLD
    value = got[0]
    if isinstance(value, (int, float)) and abs(value - want) >= 1e-6:
        if abs(value - sum(losses)) < 1e-6:
            raise AssertionError(f"on {MEAN_WORLD} ranks rank 0 returned {value:g}, the SUM of the losses "
                                 f"{losses}: all_reduce sums; the mean divides by dist.get_world_size()")  # fmt: skip
        if any(abs(value - sum(losses) / n) < 1e-6 for n in range(1, 9) if n != MEAN_WORLD):
            raise AssertionError(f"on {MEAN_WORLD} ranks rank 0 returned {value:g} = the sum / a fixed number; "
                                 f"divide by dist.get_world_size() (the mean is {want:g})")  # fmt: skip
    assert isinstance(value, (int, float)) and abs(value - want) < 1e-6, (
        f"rank 0 returned {value!r}; the mean of the ranks' losses {losses} is {want:g}"
    )
    others = got[1:]
    assert all(v is None or (isinstance(v, (int, float)) and abs(v - want) < 1e-6) for v in others), (
        f"the other ranks returned {others!r}: return None (only rank 0 reports) or the same mean"
    )
    return f"no hang, rank 0 reports the mean {want:g}"


def _train_with_hook(hook: Callable[..., Any]) -> dict[str, Any]:
    """One micro-batch per update, the student's comm hook on DDP, its collectives counted."""
    ddp = wrap(model(SETUP), bucket_cap_mb=25)
    ddp.register_comm_hook(None, hook)
    counter = hooked_steps(ddp, UPDATES, SETUP)
    out = {
        "events": [(e.op, e.dtype, e.nbytes) for e in counter.events],
        "bytes_per_update": [p["bytes"] for p in counter.summary()["per_step"]],
        "param_bytes": sum(param_bytes(ddp.module)),
        "params": flat(ddp.module, dtype=torch.float64),
        "fingerprint": fingerprint(ddp.module),
    }
    del ddp
    return out


@grader(
    "Exercise 3 · a comm hook that sends float16",
    hint="reread exercise 3's introduction: what must the future's value hold, in which dtype, "
    "and is the all-reduce a sum or a mean?",
)
def check_fp16_hook(fp16_hook: Callable[..., Any]) -> str:
    got = launch(_train_with_hook, WORLD, args=(fp16_hook,), timeout=120)
    events, full = got[0]["events"], got[0]["param_bytes"]
    assert events, "the hook made no collective: it must all-reduce the bucket (dist.all_reduce)"
    dtypes = sorted({d for _, d, _ in events})
    assert dtypes == ["float16"], f"the hook sent {dtypes}, not float16"
    sent = got[0]["bytes_per_update"]
    assert sent == [full // 2] * UPDATES, f"sent {sent} bytes per update; the float32 gradients are {full} bytes"
    assert len({r["fingerprint"] for r in got}) == 1, "the ranks ended with different parameters"
    ref = large_batch_reference(1, WORLD, updates=UPDATES, setup=SETUP)
    gap = max_abs_diff(got[0]["params"], ref)
    assert gap < 2e-4, f"the parameters are {gap:.1e} away from one large batch: is the sum divided by the world size?"
    return f"{full // 2:,} bytes per update instead of {full:,}, large-batch parameters within {gap:.0e}"


@grader(
    "Exercise 2 · predict the buckets",
    hint="reread 'Gradient buckets' in section 2: in which order do the gradients become ready, and "
    "when exactly is a bucket closed?",
)
def check_buckets(n_allreduces: int) -> str:
    guess = _whole(n_allreduces)
    got = launch(counts, WORLD, kwargs=dict(caps=(BUCKET_CAP_MB,), steps=2), timeout=120)[0]
    first, after = got.per_step[str(BUCKET_CAP_MB)]
    cap = int(BUCKET_CAP_MB * 2**20)
    if guess != after:
        sizes = got.param_bytes
        if guess == len(predict(sizes, cap)):
            why = ("; that is the greedy packing in REGISTRATION order: gradients become ready in backward "
                   "order, last layer first (the list reversed)")  # fmt: skip
        elif guess == -(-sum(sizes) // cap):
            why = ("; that is the bytes divided by the cap: a gradient is never split, and a bucket closes "
                   "only once it holds at least the cap")  # fmt: skip
        else:
            why = ""
        raise AssertionError(f"you predicted {guess}; the run measured a different count{why}")
    sizes = got.bucket_bytes[str(BUCKET_CAP_MB)][-1]
    return f"measured {after} all-reduces per backward after the rebuild ({first} before it), buckets {sizes} bytes"


def _whole(answer: Any) -> int:
    """A count given as 5, 5.0 or "5"."""
    try:
        if float(answer).is_integer():
            return int(float(answer))
    except (TypeError, ValueError):
        pass
    raise AssertionError(f"n_allreduces should be a whole number of all-reduces, got {answer!r}")
