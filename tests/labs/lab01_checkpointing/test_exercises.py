"""Each grader of lab 1 rejects the bug its exercise is about and says "not attempted" for a stub."""

import itertools

import numpy as np
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint

from lab_utils.checks import NOT_ATTEMPTED, PASSED
from lab_utils.labs.lab01_checkpointing import exercises, policies
from tests.helpers.grading import graded_fail

CHAIN = dict(n_blocks=10, width=128, rows=64)
PLAN = [(0, 4, "full"), (4, 6, "store"), (6, 7, "full"), (7, 8, "full"), (8, 10, "full")]
UNIT = 64 * 128 * 4


def stub(*args, **kwargs):
    raise NotImplementedError()


def failed(grade, *args, **kwargs) -> str:
    return graded_fail(grade, *args, **kwargs)


# -- ckpt-predict: predict the bytes kept ------------------------------------------------------
def test_prediction_right_and_wrong():
    assert exercises.check_prediction(7 * UNIT, PLAN, **CHAIN) == PASSED
    assert exercises.check_prediction(np.int64(7 * UNIT), PLAN, **CHAIN) == PASSED  # numpy arithmetic's int
    failed(exercises.check_prediction, "7 units", PLAN, **CHAIN, match="give a number of bytes")
    # forgetting that the first segment's input is the batch (not counted): too high
    failed(exercises.check_prediction, 8 * UNIT, PLAN, **CHAIN, match="too high")
    # counting one tensor per stored block instead of two: too low
    failed(exercises.check_prediction, 5 * UNIT, PLAN, **CHAIN, match="too low")
    assert exercises.check_prediction(..., PLAN, **CHAIN) == NOT_ATTEMPTED


# -- ckpt-every-k: checkpoint every k blocks ---------------------------------------------------
def every_block(blocks, x, k):  # ignores k: checkpoints each block on its own
    for blk in blocks:
        x = checkpoint(blk, x, use_reentrant=False)
    return x


def reentrant(blocks, x, k):  # the batch does not require grad: the first group's weights get none
    for s in range(0, len(blocks), k):
        x = checkpoint(blocks[s : s + k], x, use_reentrant=True)
    return x


def no_checkpoint(blocks, x, k):
    return blocks(x)


def test_every_k_rejects_wrong_groupings():
    assert "the forward keeps" in failed(exercises.check_every_k, every_block)
    assert "the forward keeps" in failed(exercises.check_every_k, no_checkpoint)


def test_every_k_rejects_reentrant_checkpoint():
    assert "gradients are missing" in failed(exercises.check_every_k, reentrant)


def reentrant_input_requires_grad(blocks, x, k):  # HF's enable_input_require_grads trick: right, and said so
    x = x.detach().requires_grad_()
    for s in range(0, len(blocks), k):
        x = checkpoint(blocks[s : s + k], x, use_reentrant=True)
    return x


def test_every_k_passes_reentrant_with_an_input_that_requires_grad_and_says_so(capsys):
    assert exercises.check_every_k(reentrant_input_requires_grad) == PASSED
    assert "use_reentrant=True: right here only because" in capsys.readouterr().out
    assert exercises.check_every_k(every_k_plain) == PASSED
    assert "use_reentrant=True" not in capsys.readouterr().out


def every_k_plain(blocks, x, k):
    for s in range(0, len(blocks), k):
        x = checkpoint(blocks[s : s + k], x, use_reentrant=False)
    return x


def test_every_k_has_no_ready_made_answer_in_the_library():
    # the grader's reference is private; no module of the lab's package exports a chain runner
    from lab_utils.labs import lab01_checkpointing as checkpointing

    public = {name for mod in checkpointing.__all__ for name in getattr(checkpointing, mod).__all__}
    assert not public & {"run_chain", "segments_every_k", "strategy_segments", "STRATEGIES"}
    assert "_every_k" not in exercises.__all__


def test_every_k_stub():
    assert exercises.check_every_k(stub) == NOT_ATTEMPTED
    assert exercises.check_every_k(...) == NOT_ATTEMPTED


# -- ckpt-hooks: checkpoint with saved-tensor hooks --------------------------------------------
def keeps_everything(fn, x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        return fn(x)


def recomputes_per_tensor(fn, x):
    """Drops the tensors but re-runs fn for every tensor backward asks for."""
    count = [0]

    def pack(t):
        count[0] += 1
        return count[0] - 1

    def unpack(i):
        rebuilt = []
        keep = lambda t: rebuilt.append(t) or t  # noqa: E731
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            fn(x.detach().requires_grad_(x.requires_grad))
        return rebuilt[i]

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return fn(x)


def replays_without_grad_mode(fn, x):
    """Replays fn in backward without torch.enable_grad(): the replay saves nothing."""
    count, rebuilt = [0], []

    def pack(t):
        count[0] += 1
        return count[0] - 1

    def unpack(i):
        if not rebuilt:
            with torch.autograd.graph.saved_tensors_hooks(lambda t: rebuilt.append(t) or t, lambda t: t):
                fn(x)
        return rebuilt[i]

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return fn(x)


def test_hooks_explains_a_replay_without_grad_mode():
    failed(exercises.check_hooks, replays_without_grad_mode, match="grad mode off.*torch.enable_grad")


def test_hooks_rejects_keeping_the_tensors():
    assert "still in memory" in failed(exercises.check_hooks, keeps_everything)


def test_hooks_rejects_recomputing_for_every_tensor():
    assert "exactly once" in failed(exercises.check_hooks, recomputes_per_tensor)


def torch_checkpoint_itself(fn, x):  # passes every measurement, but is not the exercise
    return checkpoint(fn, x, use_reentrant=False)


def test_hooks_rejects_calling_torch_checkpoint():
    failed(exercises.check_hooks, torch_checkpoint_itself, match="calls torch's checkpoint")
    failed(exercises.check_hooks, lambda fn, x: checkpoint(fn, x, use_reentrant=True), match="use_reentrant=True")


def test_checkpoint_error_is_a_cross_with_a_hint():
    def replays_other_ops(blocks, x, k):  # the replay saves fewer tensors than the forward did
        calls = [0]

        def group(h):
            calls[0] += 1
            y = blocks(h)
            return y * y if calls[0] == 1 else y * 2

        return checkpoint(group, x, use_reentrant=False)

    failed(exercises.check_every_k, replays_other_ops, match="CheckpointError.*same ops on the same inputs")


def test_hooks_stub():
    assert exercises.check_hooks(stub) == NOT_ATTEMPTED


# -- ckpt-policy: a policy under a byte budget ---------------------------------------------------
def budget_policy_saving(choose):
    """A budget policy that saves the census keys ``choose(census, budget)`` picks."""

    def budget_policy(census, budget):
        keep = choose(census, budget)

        def policy(ctx, op, *args, **kwargs):
            if policies.op_key(op, args) in keep:
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return policy

    return budget_policy


def by_flops_per_byte(key=lambda r: -r.flops_per_byte, skip_last=True, stop_at_first_misfit=False):
    """Greedy choices: the solution's (most FLOPs per byte first, the replay-unreached last product
    skipped, a row that does not fit skipped) and its plausible variants."""

    def choose(census, budget):
        products = [r for r in census if r.flops]
        last = max(r.index for r in products)
        keep, used = set(), 0
        for r in sorted(products, key=key):
            if skip_last and r.index == last:
                continue
            if used + r.out_bytes <= budget:
                keep.add(r.key)
                used += r.out_bytes
            elif stop_at_first_misfit:
                break
        return keep

    return choose


def test_budget_policy_accepts_the_greedy_choice(capsys):
    assert exercises.check_policy(budget_policy_saving(by_flops_per_byte())) == PASSED
    out = capsys.readouterr().out
    assert "extra FLOPs (the best of every set:" in out, out


def test_budget_policy_accepts_a_set_better_than_the_rule():  # the rule is greedy: the optimum passes too
    def best(census, budget):
        products = [r for r in census if r.flops and r.index != max(q.index for q in census if q.flops)]
        sets = [
            {r.key for r, on in zip(products, mask) if on}
            for mask in itertools.product((False, True), repeat=len(products))
            if sum(r.out_bytes for r, on in zip(products, mask) if on) <= budget
        ]
        return max(sets, key=lambda keys: sum(r.flops for r in products if r.key in keys))

    assert exercises.check_policy(budget_policy_saving(best)) == PASSED


def test_budget_policy_rejects_caching_what_the_replay_never_reads():  # fc_out: early stop
    failed(exercises.check_policy, budget_policy_saving(by_flops_per_byte(skip_last=False)), match="FLOPs")


def test_budget_policy_rejects_a_greedy_choice_by_raw_flops():
    failed(exercises.check_policy, budget_policy_saving(by_flops_per_byte(key=lambda r: -r.flops)), match="FLOPs")


def test_budget_policy_rejects_stopping_at_the_first_row_that_does_not_fit():
    failed(exercises.check_policy, budget_policy_saving(by_flops_per_byte(stop_at_first_misfit=True)), match="FLOPs")


def test_budget_policy_error_from_a_policy_is_a_cross():
    def bad(census, budget):
        return lambda ctx, op, *args, **kwargs: {"addmm": CheckpointPolicy.MUST_SAVE}[op.__name__]  # KeyError

    failed(exercises.check_policy, bad, match="raised KeyError")


def test_budget_policy_rejects_saving_every_product():
    assert "budget" in failed(exercises.check_policy, budget_policy_saving(lambda c, b: {r.key for r in c if r.flops}))


def test_budget_policy_rejects_saving_the_linear_layers():  # Korthikanti's set: over this budget
    linears = lambda c, b: {r.key for r in c if r.op == "aten.addmm.default"}  # noqa: E731
    assert "budget" in failed(exercises.check_policy, budget_policy_saving(linears))


def test_budget_policy_rejects_recomputing_everything():
    assert "FLOPs" in failed(exercises.check_policy, budget_policy_saving(lambda c, b: set()))


def test_budget_policy_rejects_filling_the_budget_by_bytes():  # biggest outputs first, not FLOPs per byte
    def by_bytes(census, budget):
        keep, used = set(), 0
        for r in sorted(census, key=lambda r: -r.out_bytes):
            if used + r.out_bytes <= budget:
                keep.add(r.key)
                used += r.out_bytes
        return keep

    assert "FLOPs" in failed(exercises.check_policy, budget_policy_saving(by_bytes))


def test_policy_stub():
    assert exercises.check_policy(stub) == NOT_ATTEMPTED
