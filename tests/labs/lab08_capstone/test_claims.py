"""Lab 8's ledger claims, each as cheap as it can be checked: the calculator against a real step
(the notebook's worked shape), ZeRO's Figure 1, a process's own peak, and the planner against
torchtitan's published runs. The mutations of tools/mutations/lab08.py must break them."""

import dataclasses

import pytest
from transformers import LlamaConfig

from lab_utils import plan
from lab_utils.labs.lab08_capstone import measure, published
from lab_utils.memory import stepmem

CFG = LlamaConfig(vocab_size=4000, hidden_size=128, intermediate_size=344, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
WORKED = stepmem.from_hf_config(CFG, batch=4, seq=128)  # the notebook's section 1


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_calculator_predicts_a_real_llama_step(precision):  # 08/activations-1pct, 08/peak-5pct
    s = dataclasses.replace(WORKED, precision=precision)
    got, want = measure.step_parts(s), stepmem.predict(s)
    assert abs(want.activations - got.activations) <= 0.01 * got.activations
    assert abs(want.peak - got.peak) <= 0.05 * got.peak


def test_zero_figure_1():  # 08/zero-figure-1
    gb = [sum(plan.cost.zero_state(7_500_000_000, world_size=64, stage=k, layout="zero")) / 1e9 for k in range(4)]
    assert [f"{v:.1f}" for v in gb] == ["120.0", "31.4", "16.6", "1.9"]


def test_a_fresh_process_peak_is_predicted():  # 08/vmhwm-5pct
    s = dataclasses.replace(WORKED, layers=4, hidden=256, heads=8, kv_heads=2, ffn=688, vocab=8000, batch=2)
    got = measure.process_peak(s, timeout_s=300)
    measured, predicted = got["hwm"] - got["before"], stepmem.predict(s).peak
    assert abs(predicted - measured) <= 0.05 * measured


def test_the_planner_follows_torchtitans_drop_from_8_to_128_gpus():  # 08/state-drop
    planner, pub = published.drop(published.compare())
    assert abs(planner - pub) <= 0.10 * pub


def test_in_torchtitans_layout_the_planner_is_under_each_reserved_peak():  # 08/under-reserved
    for row in published.compare():
        assert 0 <= row.published - row.adjusted <= 0.10 * row.published


def test_the_published_table_reads():
    text = published.table(published.compare())
    assert "max_memory_reserved" in text and len(text.splitlines()) <= 20


def test_the_planners_legend_quotes_the_published_comparison():
    rows = published.compare()
    above = [round((r.planner.peak - r.published) / published.GiB) for r in rows]
    under = [round(100 * (r.published - r.adjusted) / r.published) for r in rows]
    text = plan.report.MODELS["memory"]
    assert f"{rows[0].run.gib} and {rows[1].run.gib} GiB" in text
    assert f"{above[0]} and {above[1]} GiB above them" in text and under == [9, 9] and "9 % under" in text


def test_the_published_throughput_beside_the_planners():
    rows = published.compare()
    assert [round(r.tokens_per_s) for r in rows] == [6547, 6529]
    assert [round(r.published_tflops) for r in rows] == [347, 338]
    assert "5,762" in published.throughput(rows)


def test_the_notebooks_prose_quotes_the_published_comparison():
    # the markdown below the table retypes the table's numbers: they must be the computed ones
    import json

    from tools.solutions import LABS

    nb = json.loads((LABS / "08_plan_your_run" / "08_plan_your_run.ipynb").read_text(encoding="utf-8"))
    text = " ".join(
        " ".join("".join(c["source"]).split()) for c in nb["cells"] if c["cell_type"] == "markdown"
    )  # one paragraph, line breaks as spaces
    rows, g = published.compare(), published.GiB
    state = [(r.planner.weights + r.planner.gradients + r.planner.optimizer) / g for r in rows]
    planner_drop, published_drop = published.drop(rows)
    above = [round((r.planner.peak - r.published) / g) for r in rows]
    layout = -sum(rows[0].gaps.values()) / g
    left = [(r.published - r.adjusted) / g for r in rows]
    faster = [round(100 * (r.tokens_per_s / r.run.tokens_per_s - 1)) for r in rows]
    for said in (f"{state[0]:.1f} GiB, then {state[1]:.1f}", f"falls by {planner_drop:.1f} GiB",
                 f"fell by {published_drop:.1f}", f"{above[0]} and {above[1]} GiB above the published peaks",
                 f"account for {layout:.0f} GiB", f"{left[0]:.1f} and {left[1]:.1f} GiB (9 %)",
                 f"{faster[0]} and {faster[1]} % faster"):  # fmt: skip
        assert said in text, said
