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
        for k in (k for k in range(1, shape.batch + 1) if shape.batch % k == 0):
            a = stepmem.predict(dataclasses.replace(shape, accumulation=k))
            if a.peak - a.temporaries <= budget:
                return k, False

    def checkpointing_first(shape, budget):
        for k in (k for k in range(1, shape.batch + 1) if shape.batch % k == 0):
            if stepmem.predict(dataclasses.replace(shape, accumulation=k, checkpointing=True)).peak <= budget:
                return k, True

    def fewest_k_either_way(shape, budget):  # K first, then checkpointing: recompute to save a micro-batch
        for k in (k for k in range(1, shape.batch + 1) if shape.batch % k == 0):
            for ckpt in (False, True):
                if stepmem.predict(dataclasses.replace(shape, accumulation=k, checkpointing=ckpt)).peak <= budget:
                    return k, ckpt

    def never_checkpoints(shape, budget):  # section 2's first half only
        for k in (k for k in range(1, shape.batch + 1) if shape.batch % k == 0):
            if stepmem.predict(dataclasses.replace(shape, accumulation=k)).peak <= budget:
                return k, False
        raise ValueError("nothing fits")

    def never_checkpoints_none(shape, budget):
        try:
            return never_checkpoints(shape, budget)
        except ValueError:
            return None

    def powers_of_two(shape, budget):  # section 2's table tries K = 1, 2, 4, 8 only
        for ckpt in (False, True):
            for k in (1, 2, 4, 8):
                if shape.batch % k == 0:
                    s = dataclasses.replace(shape, accumulation=k, checkpointing=ckpt)
                    if stepmem.predict(s).peak <= budget:
                        return k, ckpt

    graded_fail(exercises.check_cheapest_fit, largest_k, match="fits too and costs less")
    graded_fail(exercises.check_cheapest_fit, without_temporaries, match="measured peak .* over the budget")
    graded_fail(exercises.check_cheapest_fit, checkpointing_first, match="fits too and costs less")
    graded_fail(exercises.check_cheapest_fit, fewest_k_either_way, match="K=4, checkpointing=False fits too")
    graded_fail(exercises.check_cheapest_fit, never_checkpoints, match="raised ValueError .* checkpointing=True fits")
    graded_fail(exercises.check_cheapest_fit, never_checkpoints_none, match="returned None, not a pair")
    graded_fail(exercises.check_cheapest_fit, powers_of_two, match="batch 12, .* K=3, checkpointing=False fits too")
    graded_fail(exercises.check_cheapest_fit, lambda s, b: (3, False), match="does not divide the batch")


def _big(config: str = "llama-3-8b", **kw):
    args = dict(batch=32, seq=4096, devices=16, memory="80GB") | kw
    return plan.request(config, **args)[0]


def test_scale_down_right_and_wrong():
    right = _solution("plan-scale", "scale_down")
    big = _big()  # lab 8's own case
    assert exercises.check_scale_down(right, big) == PASSED

    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(right(b), kv_heads=b.heads), big,
                match=r"changed \['kv_heads'\]")  # fmt: skip
    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(right(b), precision="fp32"), big,
                match="changed")  # fmt: skip
    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(b, layers=2), big,
                match="over the CPU budget")  # fmt: skip
    graded_fail(exercises.check_scale_down, lambda b: dataclasses.replace(right(b), hidden=right(b).hidden + 1), big,
                match="raised ValueError")  # fmt: skip

    def hint_literally(b):  # shrink hidden, layers and vocabulary only, as the old hint said: seq and batch stay
        h = b.heads * 2
        return dataclasses.replace(b, hidden=h, ffn=round(b.ffn_size * h / b.hidden), layers=1, vocab=64)

    text = graded_fail(exercises.check_scale_down, hint_literally, big, match="over the CPU budget")
    assert "seq" in text and "batch" in text  # the hint names what matters


def _small(b, hidden, **kw):
    fields = dict(hidden=hidden, ffn=round(b.ffn_size * hidden / b.hidden), layers=2, vocab=256, seq=32, batch=2,
                  positions=32)  # fmt: skip
    return dataclasses.replace(b, **(fields | kw))


def test_scale_down_refuses_an_odd_llama_head_before_running_it():
    big = _big()
    for head in (1, 3):  # rotary turns pairs: HF's Llama crashes on 3, and silently broadcasts 1 to 2
        text = graded_fail(exercises.check_scale_down, lambda b, h=head: _small(b, b.heads * h), big,
                           match="head size, hidden / heads = .* is (1|3): odd")  # fmt: skip
        assert "raised" not in text and "multiple of 2 x heads = 64" in text


def test_scale_down_accepts_every_valid_shape():
    big = _big()
    for hidden, kw in ((64, {}), (128, dict(layers=1, batch=1)), (64, dict(seq=48, positions=48, vocab=1000))):
        assert exercises.check_scale_down(lambda b, h=hidden, k=kw: _small(b, h, **k), big) == PASSED
    # the GPT-2 and BERT the lab invites (fp32): the solution and a hand-made shape
    right = _solution("plan-scale", "scale_down")
    for config in ("gpt2", "bert-large"):
        gb = _big(config, batch=8, seq=512, devices=8, dtype="fp32")
        assert exercises.check_scale_down(right, gb) == PASSED, config
    gpt2 = _big("gpt2", batch=8, seq=512, devices=8, dtype="fp32")
    assert exercises.check_scale_down(lambda b: _small(b, b.heads), gpt2) == PASSED  # head size 1: no rotary


def test_weight_copies_reading_kv_heads_or_ffn_raw_is_wrong():
    """kv_heads=0 means as many as heads, ffn=0 means 4 x hidden: the third shape sets both."""
    right = _solution("plan-copies", "bf16_weight_copies")

    def raw_kv_heads(s):  # s.kv_heads, 0 for the third shape: k and v projections of width 0
        return right(s) - (2 * s.layers * 2 * s.hidden * (s.hidden // s.heads) * s.heads if not s.kv_heads else 0)

    def raw_ffn(s):  # s.ffn, 0 for the third shape: no SwiGLU matmuls
        return right(s) - (2 * s.layers * 3 * s.hidden * s.ffn_size if not s.ffn else 0)

    for wrong in (raw_kv_heads, raw_ffn):
        graded_fail(exercises.check_weight_copies, wrong, match=r"0 kv|ffn 0|the meter measures")


def test_cheapest_fit_raises_when_nothing_fits():
    right = _solution("plan-fit", "cheapest_fit")

    def never_raises(shape, budget):  # the largest K with checkpointing, even when it does not fit
        try:
            return right(shape, budget)
        except ValueError:
            return shape.batch, True

    graded_fail(exercises.check_cheapest_fit, never_raises, match="raise ValueError")


def test_not_attempted_line_names_the_section_not_the_answer(capsys):
    from lab_utils.checks import NOT_ATTEMPTED

    def stub(*args):
        raise NotImplementedError

    for grade, args in ((exercises.check_weight_copies, (stub,)), (exercises.check_cheapest_fit, (stub,))):
        assert grade(*args) == NOT_ATTEMPTED
        line = capsys.readouterr().out
        assert "hint: reread section" in line and "autocast every matmul" not in line and "divides" not in line
        assert len(line) < 140, line
