"""Lab 8's graders: the wrong answers each exercise names are ✗ (with the measurement and a
hint), the solutions and the correct variants are ✓."""

import dataclasses

from lab_utils import plan
from lab_utils.checks import PASSED
from lab_utils.labs.lab08_capstone import exercises
from lab_utils.memory import stepmem
from tests.helpers.grading import graded_fail
from tools import solutions

NS = {"dataclasses": dataclasses, "stepmem": stepmem, "exercises": exercises}


def _solution(ex_id: str, name: str):
    return solutions.solution("08_plan_your_run", ex_id, dict(NS))[name]


def test_weight_copies_right_and_wrong():
    right = _solution("plan-copies", "bf16_weight_copies")
    assert exercises.check_weight_copies(right) == PASSED

    def with_embedding(s):  # the embedding is a lookup: autocast makes no copy of it
        return right(s) + (0 if s.tied else 2 * s.vocab * s.hidden)

    def four_bytes(s):
        return 2 * right(s)

    def no_head(s):
        return right(s) - 2 * s.vocab * s.hidden

    def mha(s):  # k and v as wide as q: ignores grouped-query attention
        return right(s) + 2 * s.layers * 2 * s.hidden * (s.hidden - s.hidden // s.heads * s.n_kv_heads)

    graded_fail(exercises.check_weight_copies, with_embedding, match=r"you predict .* the meter measures")
    for wrong in (four_bytes, no_head, mha):
        graded_fail(exercises.check_weight_copies, wrong, match="the meter measures")


def test_cheapest_fit_right_and_wrong():
    right = _solution("plan-fit", "cheapest_fit")
    assert exercises.check_cheapest_fit(right) == PASSED

    def largest_k(shape, budget):
        return shape.batch, False

    def without_temporaries(shape, budget):  # the state and the activations only: too optimistic
        for k in (1, 2, 4, 8):
            a = stepmem.predict(dataclasses.replace(shape, accumulation=k))
            if a.peak - a.temporaries <= budget:
                return k, False

    def checkpointing_first(shape, budget):
        for k in (1, 2, 4, 8):
            if stepmem.predict(dataclasses.replace(shape, accumulation=k, checkpointing=True)).peak <= budget:
                return k, True

    graded_fail(exercises.check_cheapest_fit, largest_k, match="fits too and costs less")
    graded_fail(exercises.check_cheapest_fit, without_temporaries, match="measured peak .* over the budget")
    graded_fail(exercises.check_cheapest_fit, checkpointing_first, match="fits too and costs less")
    graded_fail(exercises.check_cheapest_fit, lambda s, b: (3, False), match="does not divide the batch")


def test_scale_down_right_and_wrong():
    right = _solution("plan-scale", "scale_down")
    big = plan.request("llama-3.2-1b", batch=8, seq=1024, devices=8, memory="80GB")[0]
    assert exercises.check_scale_down(right, big) == PASSED

    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(right(b), kv_heads=b.heads), big,
                match=r"changed \['kv_heads'\]")  # fmt: skip
    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(right(b), precision="fp32"), big,
                match="changed")  # fmt: skip
    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(b, layers=2), big,
                match="over the CPU budget")  # fmt: skip
    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(right(b), hidden=right(b).hidden + 1), big,
                match="raised ValueError")  # fmt: skip
